package bench

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/costmodel"
	"github.com/spillway-llm/spillway/profiles"
)

// meanErrorer is a latency predictor that reports its error over a run.
type meanErrorer interface {
	MeanError() costmodel.PredictionError
}

// addPredictorError folds the error of every latency predictor among the
// run's plugins into cr, weighting runs by their samples.
func addPredictorError(cr *ConfigResult, plugins []profiles.Plugin) {
	for _, p := range plugins {
		me, ok := p.(meanErrorer)
		if !ok {
			continue
		}
		foldPredictorError(cr, me.MeanError())
	}
}

// foldPredictorError adds one run's predictor error to cr, weighting by
// samples.
func foldPredictorError(cr *ConfigResult, e costmodel.PredictionError) {
	if cr.Predictor == nil {
		cr.Predictor = &PredictorError{}
	}
	pe := cr.Predictor
	if n := pe.TTFTSamples + e.TTFTSamples; n > 0 {
		pe.TTFTMAPE = (pe.TTFTMAPE*float64(pe.TTFTSamples) + e.TTFTMAPE*float64(e.TTFTSamples)) / float64(n)
		pe.TTFTSamples = n
	}
	if n := pe.TPOTSamples + e.TPOTSamples; n > 0 {
		pe.TPOTMAPE = (pe.TPOTMAPE*float64(pe.TPOTSamples) + e.TPOTMAPE*float64(e.TPOTSamples)) / float64(n)
		pe.TPOTSamples = n
	}
}

// predictorErrorMetric is the latency predictor's per-response relative
// error histogram: its sum / count is the mean absolute percentage error.
const predictorErrorMetric = profiles.MetricsNamespace + "_latency_predictor_relative_error"

// addPredictorErrorFrom reads the predictor's error from a picker's metrics
// (real-HTTP runs, where the plugins live behind the gateway stack).
func addPredictorErrorFrom(cr *ConfigResult, g prometheus.Gatherer) {
	mfs, err := g.Gather()
	if err != nil {
		return
	}
	var e costmodel.PredictionError
	found := false
	for _, mf := range mfs {
		if mf.GetName() != predictorErrorMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			n := int(h.GetSampleCount())
			if n == 0 {
				continue
			}
			found = true
			for _, l := range m.GetLabel() {
				if l.GetName() != "target" {
					continue
				}
				switch l.GetValue() {
				case "ttft":
					e.TTFTMAPE, e.TTFTSamples = h.GetSampleSum()/float64(n), n
				case "tpot":
					e.TPOTMAPE, e.TPOTSamples = h.GetSampleSum()/float64(n), n
				}
			}
		}
	}
	if found {
		foldPredictorError(cr, e)
	}
}

// overallGoodput is the fraction of all offered requests, every level
// together, that completed within their SLO.
func overallGoodput(levels []LevelResult) float64 {
	good, n := 0.0, 0
	for _, l := range levels {
		good += l.GoodputFraction * float64(l.Requests)
		n += l.Requests
	}
	if n == 0 {
		return 0
	}
	return good / float64(n)
}
