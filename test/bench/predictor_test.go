package bench

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The latency-predictor configuration reports its error in results.json;
// configurations without a predictor report none.
func TestPredictorErrorReported(t *testing.T) {
	needPlugins(t, "latency-predictor", "latency-scorer", "prefix-cache-affinity-filter")
	res := quickResults(t, "mixed-bursty-quick", "k8-round-robin", "latency-predictor")
	for _, c := range res.Configs {
		switch c.Name {
		case "k8-round-robin":
			if c.Predictor != nil {
				t.Errorf("round-robin reports a predictor: %+v", c.Predictor)
			}
		case "latency-predictor":
			p := c.Predictor
			if p == nil || p.TTFTSamples == 0 || p.TPOTSamples == 0 || !(p.TTFTMAPE > 0) || !(p.TPOTMAPE > 0) {
				t.Fatalf("latency-predictor error not reported: %+v", p)
			}
			// every completed request teaches the predictor once
			done := 0
			for _, l := range c.Levels {
				done += l.Completed
			}
			if p.TTFTSamples != done {
				t.Errorf("%d TTFT samples for %d completed requests", p.TTFTSamples, done)
			}
		}
		if !(c.GoodputFraction > 0 && c.GoodputFraction <= 1) {
			t.Errorf("%s: overall goodput %g", c.Name, c.GoodputFraction)
		}
	}
}

func TestPredictorErrorFromMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: predictorErrorMetric, Buckets: []float64{1}}, []string{"predictor", "target"})
	reg.MustRegister(h)
	for _, v := range []float64{0.1, 0.3} {
		h.WithLabelValues("p", "ttft").Observe(v)
	}
	h.WithLabelValues("p", "tpot").Observe(0.5)
	cr := ConfigResult{}
	addPredictorErrorFrom(&cr, reg)
	addPredictorErrorFrom(&cr, prometheus.NewRegistry()) // another run without a predictor changes nothing
	p := cr.Predictor
	if p == nil || math.Abs(p.TTFTMAPE-0.2) > 1e-12 || p.TTFTSamples != 2 || p.TPOTMAPE != 0.5 || p.TPOTSamples != 1 {
		t.Fatalf("%+v", p)
	}
	if g := overallGoodput([]LevelResult{{Requests: 10, GoodputFraction: 1}, {Requests: 30, GoodputFraction: 0.5}}); g != 25.0/40 {
		t.Fatalf("overall goodput %g, want 0.625", g)
	}
}
