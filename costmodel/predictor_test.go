package costmodel

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/spillway-llm/spillway/profiles"
)

func req(id string, prompt, maxTokens int) *profiles.Request {
	r := &profiles.Request{ID: id, Model: "m", MaxTokens: maxTokens}
	r.Tokens = profiles.TokenCounts{Text: prompt, Counted: true}
	return r
}

func TestBucketPredictorLearnsPerBucket(t *testing.T) {
	p := NewBucketPredictor(100)
	assert.Equal(t, 100.0, p.Predict(req("a", 1000, 0)))
	for i := 0; i < 200; i++ {
		p.Observe(req("x", 1000, 0), 800)
		p.Observe(req("y", 20, 0), 10)
	}
	assert.InDelta(t, 800, p.Predict(req("b", 1000, 0)), 1)
	assert.InDelta(t, 10, p.Predict(req("c", 20, 0)), 1)
	// Bounded by max_tokens.
	assert.Equal(t, 50.0, p.Predict(req("d", 1000, 50)))
	// A different model has its own estimate.
	other := req("e", 1000, 0)
	other.Model = "n"
	assert.Equal(t, 100.0, p.Predict(other))
}

func TestInjectedErrorIsBoundedAndDeterministic(t *testing.T) {
	p := NewBucketPredictor(1000)
	p.InjectedError = 1.5
	lo, hi := 1e9, 0.0
	for i := 0; i < 2000; i++ {
		r := req(fmt.Sprint(i), 100, 0)
		v := p.Predict(r)
		assert.Equal(t, v, p.Predict(r), "same request, same noise")
		lo, hi = min(lo, v), max(hi, v)
	}
	assert.GreaterOrEqual(t, lo, 50.0) // clamped at 0.05×
	assert.LessOrEqual(t, hi, 2500.0)
	assert.Greater(t, hi-lo, 1500.0, "noise actually spreads predictions")
}
