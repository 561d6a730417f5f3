package director

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spillway-llm/spillway/profiles"
)

// Metrics are the front doors' request metrics. The scheduler exports its
// own (spillway_scheduler_e2e_duration_seconds, spillway_plugin_duration_seconds,
// spillway_decisions_total); these describe what the client saw.
type Metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	duration prometheus.Histogram
	ttft     prometheus.Histogram
	inflight prometheus.Gauge
	// codes caches the counters of common status codes: the label lookup
	// hashes and locks, and this runs on every request.
	codes map[int]prometheus.Counter
}

// Request latencies span milliseconds (cache hit, short answer) to minutes
// (long generations).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewMetrics registers the request metrics with reg (reusing them when a
// second director shares the registry).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	ns := profiles.MetricsNamespace
	m := &Metrics{
		requests: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "requests_total",
			Help: "Requests handled by the front door, by the HTTP status the client got (499: client went away).",
		}, []string{"code"})),
		errors: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "request_errors_total",
			Help: "Requests that ended in an error status (≥ 400) or were cancelled, by code.",
		}, []string{"code"})),
		duration: profiles.RegisterCollector(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "request_duration_seconds",
			Help: "Time from the complete request reaching the picker to the end of its response.", Buckets: latencyBuckets,
		})),
		ttft: profiles.RegisterCollector(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Name: "ttft_seconds",
			Help: "Time from the complete request reaching the picker to the first response body chunk.", Buckets: latencyBuckets,
		})),
		inflight: profiles.RegisterCollector(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Name: "requests_in_flight",
			Help: "Requests dispatched whose response has not ended.",
		})),
		codes: map[int]prometheus.Counter{},
	}
	for _, c := range []int{200, 400, 404, 429, 499, 500, 502, 503} {
		m.codes[c] = m.requests.WithLabelValues(strconv.Itoa(c))
	}
	return m
}

// observe counts one finished request.
func (m *Metrics) observe(code int) {
	if c, ok := m.codes[code]; ok {
		c.Inc()
	} else {
		m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	}
	if code >= 400 {
		m.errors.WithLabelValues(strconv.Itoa(code)).Inc()
	}
}
