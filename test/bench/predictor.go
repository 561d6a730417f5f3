package bench

import (
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
		e := me.MeanError()
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
