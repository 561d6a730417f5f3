package scrape

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

// metrics are the scraper's own series on the picker's /metrics.
type metrics struct {
	stale    *prometheus.GaugeVec
	errors   *prometheus.CounterVec
	duration prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		stale: profiles.RegisterCollector(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: profiles.MetricsNamespace, Name: "endpoint_metrics_stale",
			Help: "1 when an endpoint's engine metrics are stale (last scrape failed or too old), else 0.",
		}, []string{"endpoint"})),
		errors: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: profiles.MetricsNamespace, Name: "scrape_errors_total",
			Help: "Failed scrapes of an endpoint's /metrics.",
		}, []string{"endpoint"})),
		duration: profiles.RegisterCollector(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: profiles.MetricsNamespace, Name: "scrape_duration_seconds",
			Help:    "Time to fetch and parse one endpoint's /metrics.",
			Buckets: []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1},
		})),
	}
}

// forget drops a removed endpoint's series so that departed endpoints do not
// linger on /metrics.
func (m *metrics) forget(endpoint string) {
	m.stale.DeleteLabelValues(endpoint)
	m.errors.DeleteLabelValues(endpoint)
}
