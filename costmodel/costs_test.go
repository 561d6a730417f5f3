package costmodel

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPriceHandComputed(t *testing.T) {
	c := Costs{PrefillSecondsPerToken: 1.0 / 20000, DecodeStepBaseSeconds: 0.02, DecodeStepPerSeqSeconds: 0.001}
	cand := Candidate{QueuedPrefillTokens: 40000, Running: 3, Remaining: []float64{50, 500, 5000}, KVUsage: 0.7, KVCapacityTokens: 100000}
	w := Work{PrefillTokens: 2000, KVTokens: 2000 + 1000, Output: 1000, SLOMultiplier: 1}
	got := c.Price(cand, w, 1, 0.8)
	// backlog = 40000/20000 = 2 s
	assert.InDelta(t, 2.0, got.Backlog, 1e-9)
	// own = 2000/20000 + 1000 × (0.02 + 0.001×4) = 0.1 + 24 = 24.1 s
	assert.InDelta(t, 24.1, got.Own, 1e-9)
	// imposed = 0.001 × (50 + 500 + 1000) = 1.55 s
	assert.InDelta(t, 1.55, got.Imposed, 1e-9)
	// kv: after = 0.7 + 3000/100000 = 0.73 < 0.8 → 0
	assert.Zero(t, got.KV)
	assert.InDelta(t, 2+24.1+1.55, got.Total, 1e-9)

	// Past the high-water mark: after = 0.7 + 20000/100000 = 0.9; over = 0.1;
	// kv = 1 × own × 0.1/0.2 = own/2.
	w.KVTokens = 20000
	got = c.Price(cand, w, 1, 0.8)
	assert.InDelta(t, got.Own/2, got.KV, 1e-9)

	// A tight SLO class doubles its own term only.
	w.KVTokens, w.SLOMultiplier = 3000, 2
	got2 := c.Price(cand, w, 1, 0.8)
	assert.InDelta(t, 48.2, got2.Own, 1e-9)
	assert.InDelta(t, 1.55, got2.Imposed, 1e-9)
}

func TestPriceShortBeatsLongOnIdle(t *testing.T) {
	c := DefaultCosts
	idle := Candidate{}
	busy := Candidate{Running: 30, Remaining: make([]float64, 30)}
	for i := range busy.Remaining {
		busy.Remaining[i] = 2000
	}
	w := Work{Output: 4000}
	require.Less(t, c.Price(idle, w, 0, 0.8).Total, c.Price(busy, w, 0, 0.8).Total)
	// A one-token request barely cares about the running batch's length.
	tiny := Work{Output: 1}
	d := c.Price(busy, tiny, 0, 0.8).Total - c.Price(idle, tiny, 0, 0.8).Total
	assert.Less(t, d, 0.05)
}

func TestCostsValidate(t *testing.T) {
	assert.NoError(t, DefaultCosts.Validate())
	assert.Error(t, Costs{}.Validate())
	assert.Error(t, Costs{PrefillSecondsPerToken: 1, DecodeStepBaseSeconds: math.NaN()}.Validate())
}
