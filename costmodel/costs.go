package costmodel

import (
	"fmt"
	"math"
)

// Costs are the hardware's per-token costs, measured by `spillway
// calibrate`. Without them the size-aware terms are mis-scaled and the
// scorer degenerates into queue counting.
type Costs struct {
	// PrefillSecondsPerToken is 1 / peakPrefillThroughput.
	PrefillSecondsPerToken float64 `json:"prefillSecondsPerToken"`
	// DecodeStepBaseSeconds is a decode step's fixed part (the intercept
	// of step(b) = base + perSeq × b: weights streamed once per step).
	DecodeStepBaseSeconds float64 `json:"decodeStepBaseSeconds"`
	// DecodeStepPerSeqSeconds is what each further running sequence adds to
	// a step.
	DecodeStepPerSeqSeconds float64 `json:"decodeStepPerSeqSeconds"`
}

// DefaultCosts match the simulator's default profile, qwen3-32b-h100
// (docs/sim.md): prefill at its peak B / T(B) = 8192 / 0.400 s = 20,480
// tok/s; a decode-only step is StepBase + d × (DecodePerSeq +
// DecodePerCtxToken × ctx) = 12 ms + d × (200 µs + 40 ns × ctx), i.e.
// base 12 ms and 240 µs per sequence at the ~1k-token contexts the step is
// quoted at (TPOT 12.2 / 19.6 / 26.9 ms at 1 / 32 / 64 streams). Longer
// contexts cost more per sequence (4k: 360 µs); calibrate on the real path.
var DefaultCosts = Costs{PrefillSecondsPerToken: 1.0 / 20480, DecodeStepBaseSeconds: 0.012, DecodeStepPerSeqSeconds: 0.00024}

// Validate checks the costs are usable.
func (c Costs) Validate() error {
	if !(c.PrefillSecondsPerToken > 0) || !(c.DecodeStepBaseSeconds > 0) || c.DecodeStepPerSeqSeconds < 0 {
		return fmt.Errorf("costs must be positive (prefillSecondsPerToken %g, decodeStepBaseSeconds %g, decodeStepPerSeqSeconds %g)",
			c.PrefillSecondsPerToken, c.DecodeStepBaseSeconds, c.DecodeStepPerSeqSeconds)
	}
	return nil
}

// Step returns one decode step's time with batch running sequences.
func (c Costs) Step(batch int) float64 {
	return c.DecodeStepBaseSeconds + c.DecodeStepPerSeqSeconds*float64(max(batch, 1))
}

// Candidate is one endpoint's live state, as the scorer prices it.
type Candidate struct {
	QueuedPrefillTokens float64   // uncached prompt tokens booked and not yet prefilled
	Running             int       // sequences decoding
	Remaining           []float64 // predicted remaining output tokens of each running sequence
	KVUsage             float64   // 0..1 before admission
	KVCapacityTokens    float64   // 0 = unknown (no KV term)
}

// Work is the request being priced.
type Work struct {
	PrefillTokens float64 // uncached prompt tokens this endpoint would prefill (0 in a pure decode pool)
	KVTokens      float64 // tokens of KV it adds (prompt + predicted output)
	Output        float64 // predicted output tokens
	SLOMultiplier float64 // ≥ 1; tight classes weigh their own latency more
}

// Terms is a priced placement, kept for explanations.
type Terms struct {
	Backlog float64 // waiting for committed prefill work ahead of it
	Own     float64 // its own prefill and decode time at the post-admission batch size
	Imposed float64 // slowdown it imposes on running sequences
	KV      float64 // post-admission KV pressure penalty
	Total   float64
}

// Price returns the marginal completion-time cost of placing w on c:
//
//	backlog = queuedPrefill × prefillCost
//	own     = (prefillTokens × prefillCost + output × step(running+1)) × sloMultiplier
//	imposed = perSeqCost × Σ min(remaining_i, output)
//	kv      = kvWeight × own × max(0, usageAfter − kvHighWater) / (1 − kvHighWater)
func (c Costs) Price(cand Candidate, w Work, kvWeight, kvHighWater float64) Terms {
	m := w.SLOMultiplier
	if m < 1 {
		m = 1
	}
	var t Terms
	t.Backlog = cand.QueuedPrefillTokens * c.PrefillSecondsPerToken
	t.Own = (w.PrefillTokens*c.PrefillSecondsPerToken + w.Output*c.Step(cand.Running+1)) * m
	for _, r := range cand.Remaining {
		t.Imposed += math.Min(r, w.Output)
	}
	t.Imposed *= c.DecodeStepPerSeqSeconds
	if cand.KVCapacityTokens > 0 && kvWeight > 0 && kvHighWater < 1 {
		after := cand.KVUsage + w.KVTokens/cand.KVCapacityTokens
		if over := after - kvHighWater; over > 0 {
			t.KV = kvWeight * t.Own * over / (1 - kvHighWater)
		}
	}
	t.Total = t.Backlog + t.Own + t.Imposed + t.KV
	return t
}
