package prefill

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spillway-llm/spillway/profiles"
)

const ns = profiles.MetricsNamespace

type prefixMetrics struct {
	blocks  prometheus.Gauge
	lookups prometheus.Counter
	hits    prometheus.Counter
}

func newPrefixMetrics(reg prometheus.Registerer, producer string) *prefixMetrics {
	blocks := profiles.RegisterCollector(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "prefix_index_blocks",
		Help: "Block entries held by a prefix index, summed over endpoints.",
	}, []string{"producer"}))
	lookups := profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "prefix_lookup_blocks_total",
		Help: "Prompt blocks looked up in a prefix index (hit ratio = prefix_hit_blocks_total / this).",
	}, []string{"producer"}))
	hits := profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "prefix_hit_blocks_total",
		Help: "Prompt blocks matched on the best-matching endpoint of each request.",
	}, []string{"producer"}))
	return &prefixMetrics{blocks: blocks.WithLabelValues(producer), lookups: lookups.WithLabelValues(producer), hits: hits.WithLabelValues(producer)}
}

type kvEventMetrics struct {
	events  *prometheus.CounterVec // by producer, endpoint, type
	gaps    *prometheus.CounterVec // by producer, endpoint, action (replayed|dropped|reset)
	decodeE *prometheus.CounterVec
}

func newKVEventMetrics(reg prometheus.Registerer) *kvEventMetrics {
	return &kvEventMetrics{
		events: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "kv_events_total",
			Help: "vLLM KV-cache events applied, by type.",
		}, []string{"producer", "endpoint", "type"})),
		gaps: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "kv_event_sequence_breaks_total",
			Help: "KV-event sequence gaps and resets, by what was done (replayed, dropped, reset).",
		}, []string{"producer", "endpoint", "action"})),
		decodeE: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "kv_event_errors_total",
			Help: "KV-event messages that could not be used, by reason.",
		}, []string{"producer", "endpoint", "reason"})),
	}
}

type affinityMetrics struct {
	sticky, released, noSticky, explored prometheus.Counter
	gap                                  prometheus.Observer
	stickySize                           prometheus.Observer
}

func newAffinityMetrics(reg prometheus.Registerer, filter string) *affinityMetrics {
	v := profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "affinity_decisions_total",
		Help: "prefix-cache-affinity-filter decisions: sticky (only warm endpoints passed), released (saturation release passed all), no_sticky (no warm endpoint), explored (exploration passed all).",
	}, []string{"filter", "outcome"}))
	gap := profiles.RegisterCollector(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "affinity_ttft_gap_seconds",
		Help:    "Estimated TTFT of the best sticky endpoint minus the best other's, for decisions that had both (the release fires above maxTTFTPenaltyMs).",
		Buckets: []float64{-10, -1, 0, 0.5, 1, 2, 5, 10, 14, 18, 25, 36, 60},
	}, []string{"filter"}))
	size := profiles.RegisterCollector(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "affinity_sticky_endpoints",
		Help:    "Size of the sticky set per decision.",
		Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128},
	}, []string{"filter"}))
	return &affinityMetrics{
		sticky: v.WithLabelValues(filter, "sticky"), released: v.WithLabelValues(filter, "released"),
		noSticky: v.WithLabelValues(filter, "no_sticky"), explored: v.WithLabelValues(filter, "explored"),
		gap: gap.WithLabelValues(filter), stickySize: size.WithLabelValues(filter),
	}
}

type inflightMetrics struct {
	tokens, requests *prometheus.GaugeVec
}

func newInflightMetrics(reg prometheus.Registerer) *inflightMetrics {
	return &inflightMetrics{
		tokens: profiles.RegisterCollector(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "inflight_tokens",
			Help: "Tokens booked by the router on an endpoint and not yet released: uncached prompt tokens until prefill ends, plus the output estimate when enabled.",
		}, []string{"endpoint"})),
		requests: profiles.RegisterCollector(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "inflight_requests",
			Help: "Requests dispatched to an endpoint and not yet finished.",
		}, []string{"endpoint"})),
	}
}
