package costmodel

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spillway-llm/spillway/profiles"
)

func eps(n int) []*profiles.Endpoint {
	out := make([]*profiles.Endpoint, n)
	for i := range out {
		out[i] = profiles.NewEndpoint(i, fmt.Sprintf("d%d", i), fmt.Sprintf("127.0.0.1:%d", 9000+i), map[string]string{profiles.RoleLabel: "decode"})
	}
	return out
}

func schedulerWith(t *testing.T, params string, pool []*profiles.Endpoint) *profiles.Scheduler {
	t.Helper()
	cfg := fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: marginal-cost-scorer
  name: cost
  parameters: %s
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: cost}, {pluginRef: max-score-picker}]
`, params)
	s, err := profiles.LoadConfigBytes("test.yaml", []byte(cfg), profiles.Options{Endpoints: profiles.EndpointList(pool)})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func scorer(t *testing.T, s *profiles.Scheduler) *MarginalCostScorer {
	p, ok := s.Plugin("cost")
	require.True(t, ok)
	return p.(*MarginalCostScorer)
}

func TestMarginalCostAvoidsLongBacklog(t *testing.T) {
	pool := eps(4)
	s := schedulerWith(t, `{guard: {mode: "off"}, defaultOutputTokens: 1000}`, pool)
	ctx := context.Background()
	// Put three long requests on whichever endpoints the scorer picks; each
	// new one must go to an idle endpoint while one exists.
	used := map[string]bool{}
	for i := 0; i < 4; i++ {
		r := req(fmt.Sprint(i), 500, 0)
		res, err := s.Schedule(ctx, r)
		require.NoError(t, err)
		d := res.Destination()[0].Name
		assert.False(t, used[d], "request %d went to busy %s", i, d)
		used[d] = true
		s.Dispatch(r, res).FirstChunk()
	}
	sc := scorer(t, s)
	for _, e := range pool {
		assert.Equal(t, 1, sc.InFlight(e))
	}
}

func TestMarginalCostReleasesOnFinishAndFail(t *testing.T) {
	pool := eps(3)
	s := schedulerWith(t, `{guard: {mode: "off"}}`, pool)
	sc := scorer(t, s)
	var trackers []*profiles.Tracker
	for i := 0; i < 9; i++ {
		r := req(fmt.Sprint(i), 100, 0)
		res, err := s.Schedule(context.Background(), r)
		require.NoError(t, err)
		trackers = append(trackers, s.Dispatch(r, res))
	}
	total := 0
	for _, e := range pool {
		total += sc.InFlight(e)
	}
	require.Equal(t, 9, total)
	for i, tr := range trackers {
		if i%2 == 0 {
			tr.Finish(profiles.Usage{Reported: true, CompletionTokens: 42})
		} else {
			tr.Fail(context.Canceled)
		}
	}
	for _, e := range pool {
		assert.Zero(t, sc.InFlight(e))
	}
	// The predictor learned from the finished ones.
	assert.InDelta(t, 42, sc.Predictor().Predict(req("z", 100, 0)), 1)
}

func TestGuardEngagesWhereConfigured(t *testing.T) {
	cases := []struct {
		params string
		width  int
		want   string
	}{
		{`{guard: {mode: auto, minPoolWidth: 3}}`, 2, "spread"},
		{`{guard: {mode: auto, minPoolWidth: 3}}`, 3, ""},
		{`{guard: {mode: auto, minPoolWidth: 5}}`, 4, "p2c"},
		{`{guard: {mode: "off"}}`, 2, ""},
		{`{guard: {mode: p2c}}`, 6, "p2c"},
		{`{guard: {mode: p2c}}`, 2, "spread"},
	}
	for _, c := range cases {
		s := schedulerWith(t, c.params, eps(c.width))
		assert.Equal(t, c.want, scorer(t, s).guardMode(c.width, 0), c.params)
	}
	// Defaults: the paper's advantage needs a decode pool of ≥ 4.
	s := schedulerWith(t, `{}`, eps(3))
	assert.Equal(t, "p2c", scorer(t, s).guardMode(3, 0))
	assert.Equal(t, "spread", scorer(t, s).guardMode(2, 0))
	assert.Equal(t, "", scorer(t, s).guardMode(4, 0))
	s = schedulerWith(t, `{guard: {mode: auto, minPoolWidth: 1, loadThreshold: 4}}`, eps(4))
	assert.Equal(t, "", scorer(t, s).guardMode(4, 16))
	assert.Equal(t, "p2c", scorer(t, s).guardMode(4, 17))
}

// Under scarcity (two decode endpoints) greedy pricing would keep sending
// short requests to the endpoint that looks cheapest; the admission guard
// keeps the in-flight counts within maxImbalance.
func TestAdmissionGuardBoundsImbalance(t *testing.T) {
	pool := eps(2)
	s := schedulerWith(t, `{guard: {mode: admission, maxImbalance: 1}}`, pool)
	sc := scorer(t, s)
	// Make d0 look much cheaper: d1 carries a long-running booking.
	long := req("long", 100, 0)
	long.MaxTokens = 30000
	res := &profiles.Result{Primary: "decode", Profiles: map[string]*profiles.ProfileResult{"decode": {Profile: "decode", Targets: []*profiles.Endpoint{pool[1]}}}}
	long.Put(sc.key, &scoredState{profile: "decode", output: 30000})
	s.Dispatch(long, res).FirstChunk()
	for i := 0; i < 6; i++ {
		r := req(fmt.Sprint(i), 100, 0)
		res, err := s.Schedule(context.Background(), r)
		require.NoError(t, err)
		s.Dispatch(r, res).FirstChunk()
		d := sc.InFlight(pool[0]) - sc.InFlight(pool[1])
		assert.LessOrEqual(t, d, 2, "imbalance after %d", i)
	}
}

// In a two-endpoint pool the auto guard spreads blindly: even when one
// endpoint is far more expensive, picks alternate.
func TestSpreadGuardAlternatesInNarrowPool(t *testing.T) {
	pool := eps(2)
	s := schedulerWith(t, `{}`, pool)
	sc := scorer(t, s)
	long := req("long", 100, 0)
	res := &profiles.Result{Primary: "decode", Profiles: map[string]*profiles.ProfileResult{"decode": {Profile: "decode", Targets: []*profiles.Endpoint{pool[1]}}}}
	long.Put(sc.key, &scoredState{profile: "decode", output: 30000})
	s.Dispatch(long, res).FirstChunk()
	counts := map[string]int{}
	for i := 0; i < 6; i++ {
		r := req(fmt.Sprint(i), 100, 0)
		res, err := s.Schedule(context.Background(), r)
		require.NoError(t, err)
		s.Dispatch(r, res).FirstChunk()
		counts[res.Destination()[0].Name]++
	}
	assert.Equal(t, map[string]int{"d0": 3, "d1": 3}, counts)
	// With the guard off, greedy pricing keeps every pick on d0.
	s = schedulerWith(t, `{guard: {mode: "off"}}`, pool)
	sc = scorer(t, s)
	long = req("long", 100, 0)
	long.Put(sc.key, &scoredState{profile: "decode", output: 30000})
	s.Dispatch(long, res).FirstChunk()
	r := req("x", 100, 0)
	got, err := s.Schedule(context.Background(), r)
	require.NoError(t, err)
	assert.Equal(t, "d0", got.Destination()[0].Name)
}

func TestBadParams(t *testing.T) {
	for _, p := range []string{`{guard: {mode: greedy}}`, `{kvHighWater: 1.5}`, `{prefillSecondsPerToken: -1}`, `{nope: 1}`} {
		cfg := `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: marginal-cost-scorer
  parameters: ` + p + `
schedulingProfiles:
- name: d
  plugins: [{pluginRef: marginal-cost-scorer}]
`
		_, err := profiles.LoadConfigBytes("bad.yaml", []byte(cfg), profiles.Options{})
		assert.Error(t, err, p)
		assert.Contains(t, err.Error(), "marginal-cost-scorer")
	}
}

// In auto mode a starved pool (every engine has a waiting queue) is spread
// blindly even where the width alone would not engage the guard.
func TestGuardSpreadsWhenEveryEngineQueues(t *testing.T) {
	pool := eps(4)
	s := schedulerWith(t, `{guard: {mode: auto, minPoolWidth: 3}}`, pool)
	busy := func(waiting int) {
		for _, e := range pool {
			e.SetMetrics(&profiles.Metrics{WaitingQueue: waiting, UpdatedAt: time.Now()})
		}
	}
	// Make d0 the cheapest by far: the others carry long bookings.
	sc := scorer(t, s)
	for i, e := range pool[1:] {
		r := req(fmt.Sprint("long", i), 100, 0)
		res := &profiles.Result{Primary: "decode", Profiles: map[string]*profiles.ProfileResult{"decode": {Profile: "decode", Targets: []*profiles.Endpoint{e}}}}
		r.Put(sc.key, &scoredState{profile: "decode", output: 20000})
		s.Dispatch(r, res).FirstChunk()
	}
	pick := func() map[string]int {
		got := map[string]int{}
		for i := 0; i < 8; i++ {
			r := req(fmt.Sprint(i), 100, 0)
			res, err := s.Schedule(context.Background(), r)
			require.NoError(t, err)
			got[res.Destination()[0].Name]++
		}
		return got
	}
	busy(0)
	assert.Equal(t, map[string]int{"d0": 8}, pick(), "not starved: greedy pricing picks the cheap endpoint")
	busy(2)
	got := pick()
	assert.Len(t, got, 4, "starved: rotation over every endpoint, got %v", got)
}
