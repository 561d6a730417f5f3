package tokenproducer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

type metrics struct {
	fallbacks   *prometheus.CounterVec // backend, reason
	imageErrors *prometheus.CounterVec // reason, action
	defaults    *prometheus.CounterVec // reason: remote_url, image_error, fetch_failed
	fetches     *prometheus.CounterVec // result
	ratio       *prometheus.GaugeVec   // model, kind
	samples     *prometheus.CounterVec // model, kind
	counted     *prometheus.CounterVec // backend, kind: text, image
}

func newMetrics(reg prometheus.Registerer) *metrics {
	ns := profiles.MetricsNamespace
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return &metrics{
		fallbacks: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "token_backend_fallback_total",
			Help: "Requests whose text the configured backend could not count and the estimate counted instead, by backend and reason.",
		}, []string{"backend", "reason"})),
		imageErrors: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "token_image_errors_total",
			Help: "Multimodal items whose size could not be read, by reason and action (reject: 400, default: default resolution).",
		}, []string{"reason", "action"})),
		defaults: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "token_image_default_resolution_total",
			Help: "Images counted at the default resolution, by why their size was unknown.",
		}, []string{"reason"})),
		fetches: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "token_remote_fetch_total",
			Help: "Bounded header fetches of remote image URLs, by result (ok, cached, error).",
		}, []string{"result"})),
		ratio: profiles.RegisterCollector(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "token_calibration_ratio",
			Help: "Learned ratio reported usage.prompt_tokens / estimate per model, for text-only (kind=text) and image-bearing (kind=image, the image part) requests.",
		}, []string{"model", "kind"})),
		samples: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "token_calibration_samples_total",
			Help: "Responses with usage that fed the count calibration, per model and kind.",
		}, []string{"model", "kind"})),
		counted: profiles.RegisterCollector(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "tokens_counted_total",
			Help: "Prompt tokens counted by the token producer, by text backend and kind (text, image).",
		}, []string{"backend", "kind"})),
	}
}
