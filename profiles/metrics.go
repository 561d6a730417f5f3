package profiles

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsNamespace prefixes every spillway metric.
const MetricsNamespace = "spillway"

// RegisterCollector registers c with reg and returns it, or the collector already
// registered under the same descriptors (a config reload or a second
// scheduler on one registry reuses the existing series).
func RegisterCollector[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		panic(err) // descriptor clash with a different type: a programming error
	}
	return c
}

// Buckets for scheduling latencies: the picker works in microseconds.
var schedBuckets = []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2}

type schedMetrics struct {
	e2e            prometheus.Histogram
	plugin         *prometheus.HistogramVec
	decisions      *prometheus.CounterVec
	scheduleErrors *prometheus.CounterVec
	staleExcluded  prometheus.Counter
	shed           prometheus.Counter
}

func newSchedMetrics(reg prometheus.Registerer) *schedMetrics {
	return &schedMetrics{
		e2e: RegisterCollector(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "scheduler_e2e_duration_seconds",
			Help: "Time to schedule one request: producers, profile handler and every profile.", Buckets: schedBuckets,
		})),
		plugin: RegisterCollector(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "plugin_duration_seconds",
			Help: "Time spent in one plugin per request.", Buckets: schedBuckets,
		}, []string{"profile", "plugin_type", "plugin"})),
		decisions: RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "decisions_total",
			Help: "Endpoints picked, by profile.",
		}, []string{"profile", "endpoint"})),
		scheduleErrors: RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "schedule_errors_total",
			Help: "Requests the scheduler could not place, by the HTTP status answered.",
		}, []string{"code"})),
		staleExcluded: RegisterCollector(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "stale_endpoints_excluded_total",
			Help: "Endpoints left out of a request's candidates because their metrics scrape was failing.",
		})),
		shed: RegisterCollector(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: MetricsNamespace, Name: "shed_requests_total",
			Help: "Sheddable requests answered 429 because the saturation detector found no endpoint with capacity.",
		})),
	}
}
