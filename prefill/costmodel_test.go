package prefill_test

import (
	"github.com/spillway-llm/spillway/costmodel"
	"github.com/spillway-llm/spillway/prefill"
)

// costmodel's latency-predictor is the predictor ttftSource latencyPredictor
// is meant to use; keep the two signatures in step.
var _ prefill.TTFTPredictor = (*costmodel.LatencyPredictor)(nil)
