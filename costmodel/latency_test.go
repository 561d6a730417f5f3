package costmodel

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spillway-llm/spillway/profiles"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

const latencyConfig = `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: latency-predictor
  parameters: {refitEvery: 16, minSamples: 16}
- type: latency-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: latency-scorer}, {pluginRef: max-score-picker}]
`

// The predictor learns a TTFT law that its prior gets wrong (a fixed 0.5 s
// overhead plus 3× slower prefill than the calibrated costs say) and its
// error shrinks.
func TestLatencyPredictorFitsOnline(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	pool := eps(3)
	s, err := profiles.LoadConfigBytes("lat.yaml", []byte(latencyConfig), profiles.Options{Endpoints: profiles.EndpointList(pool), Clock: clk})
	require.NoError(t, err)
	defer s.Close()
	p, _ := s.Plugin("latency-predictor")
	lp := p.(*LatencyPredictor)

	trueTTFT := func(prompt int) time.Duration {
		return time.Duration((0.5 + 3*float64(prompt)/20480) * float64(time.Second))
	}
	var early, late []float64
	for i := 0; i < 200; i++ {
		prompt := 1000 + (i*7919)%20000
		r := &profiles.Request{ID: fmt.Sprint(i), Model: "m", Tokens: profiles.TokenCounts{Text: prompt, Counted: true}}
		res, err := s.Schedule(context.Background(), r)
		require.NoError(t, err)
		pred, ok := lp.Predict(r, res.Destination()[0])
		require.True(t, ok)
		tr := s.Dispatch(r, res)
		want := trueTTFT(prompt)
		rel := (pred.TTFT - want).Seconds() / want.Seconds()
		if rel < 0 {
			rel = -rel
		}
		if i < 10 {
			early = append(early, rel)
		}
		if i >= 180 {
			late = append(late, rel)
		}
		clk.Advance(want)
		tr.FirstChunk()
		clk.Advance(100 * 20 * time.Millisecond)
		tr.Finish(profiles.Usage{Reported: true, CompletionTokens: 101})
	}
	assert.Greater(t, lp.Fits(), 5)
	assert.Greater(t, mean(early), 0.3, "the prior is off by design")
	assert.Less(t, mean(late), 0.05, "after fitting the error is small")
	ttftMAPE, tpotMAPE := lp.MAPE()
	assert.Less(t, ttftMAPE, mean(early))
	assert.Less(t, tpotMAPE, 0.1)
	for _, e := range pool {
		assert.Zero(t, lp.Booked(e), "bookings released")
	}
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func TestLatencyScorerPrefersLessQueuedEndpoint(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	pool := eps(2)
	s, err := profiles.LoadConfigBytes("lat.yaml", []byte(latencyConfig), profiles.Options{Endpoints: profiles.EndpointList(pool), Clock: clk})
	require.NoError(t, err)
	defer s.Close()
	// Three big prompts queued (no first chunk yet): they must alternate.
	got := map[string]int{}
	for i := 0; i < 4; i++ {
		r := &profiles.Request{ID: fmt.Sprint(i), Tokens: profiles.TokenCounts{Text: 30000, Counted: true}}
		res, err := s.Schedule(context.Background(), r)
		require.NoError(t, err)
		s.Dispatch(r, res)
		got[res.Destination()[0].Name]++
	}
	assert.Equal(t, map[string]int{"d0": 2, "d1": 2}, got)
}

func TestLatencyScorerSLOHeadroom(t *testing.T) {
	assert.InDelta(t, 0.5, part(1, 0.5, 1), 1e-9)
	assert.InDelta(t, 1, part(0, 0.5, 1), 1e-9)
	assert.InDelta(t, 0, part(3, 0.5, 1), 1e-9)
	assert.InDelta(t, 0.5, part(2, 1, 0), 1e-9)
}

func TestLatencyScorerNeedsPredictor(t *testing.T) {
	cfg := `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: latency-scorer
schedulingProfiles:
- name: d
  plugins: [{pluginRef: latency-scorer}]
`
	_, err := profiles.LoadConfigBytes("x.yaml", []byte(cfg), profiles.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "latency-predictor")
}
