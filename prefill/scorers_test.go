package prefill_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

const blendConfig = `plugins:
- type: approx-prefix-cache-producer
  name: prefix
- type: inflight-load-producer
- type: token-load-scorer
  parameters: {queueThresholdTokens: 10000}
- type: prefix-cache-scorer
- type: prefix-cache-scorer
  name: long
  parameters: {matchLengthWeight: 0.5, matchLengthScaleTokens: 64}
- type: no-hit-lru-scorer
  parameters: {prefixPluginName: prefix, prefixPluginType: approx-prefix-cache-producer}
schedulingProfiles:
- name: p
  plugins: [{pluginRef: prefix-cache-scorer, weight: 3}, {pluginRef: no-hit-lru-scorer, weight: 2}, {pluginRef: token-load-scorer}, {pluginRef: long, weight: 0}]
`

func score(t *testing.T, s *profiles.Scheduler, name string, req *profiles.Request, eps []*profiles.Endpoint) []float64 {
	t.Helper()
	out := make([]float64, len(eps))
	plugin[profiles.Scorer](t, s, name).Score(context.Background(), &profiles.CycleState{Profile: "p"}, req, eps, out)
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestScorers(t *testing.T) {
	eps := endpoints(3)
	s := sched(t, blendConfig, eps)
	ctx := context.Background()
	warm := request("m", ids(1, 128)) // 8 blocks
	if _, err := s.Schedule(ctx, warm); err != nil {
		t.Fatal(err)
	}
	s.Dispatch(warm, result("p", eps[0])).Finish(profiles.Usage{})
	held := s.Dispatch(tokensOnly(5000), result("p", eps[1])) // e1 busy
	defer held.Finish(profiles.Usage{})

	// Half the prompt cached on e0.
	req := request("m", append(ids(1, 128)[:64], ids(2, 64)...))
	if _, err := s.Schedule(ctx, req); err != nil {
		t.Fatal(err)
	}
	// token-load: look-ahead = in-flight + own uncached.
	tl := score(t, s, "token-load-scorer", req, eps)
	for i, want := range []float64{1 - 64.0/10000, 1 - (5000+128.0)/10000, 1 - 128.0/10000} {
		if !near(tl[i], want) {
			t.Errorf("token-load %s = %g, want %g", eps[i].Name, tl[i], want)
		}
	}
	pc := score(t, s, "prefix-cache-scorer", req, eps)
	if !near(pc[0], 0.5) || pc[1] != 0 || pc[2] != 0 {
		t.Errorf("prefix-cache-scorer %v, want [0.5 0 0]", pc)
	}
	// 0.5×(4/8) + 0.5×min(1, 64/64).
	if lg := score(t, s, "long", req, eps); !near(lg[0], 0.75) {
		t.Errorf("length-weighted prefix score %g, want 0.75", lg[0])
	}
	// Warm request: no-hit-lru is neutral.
	for i, v := range score(t, s, "no-hit-lru-scorer", req, eps) {
		if v != 0.5 {
			t.Errorf("warm request: no-hit-lru %s = %g, want 0.5", eps[i].Name, v)
		}
	}
}

func TestNoHitLRUSpreadsColdRequests(t *testing.T) {
	eps := endpoints(3)
	s := sched(t, blendConfig, eps)
	ctx := context.Background()
	seen := map[string]bool{}
	for i := range 3 {
		req := request("m", ids(uint32(100+i), 64)) // cold every time
		res, err := s.Schedule(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		lru := score(t, s, "no-hit-lru-scorer", req, eps)
		// Endpoints already given a cold request score below unused ones.
		for j, e := range eps {
			if seen[e.Name] && lru[j] >= 1 || !seen[e.Name] && lru[j] != 1 {
				t.Errorf("round %d: %s scored %g (used before: %v)", i, e.Name, lru[j], seen[e.Name])
			}
		}
		tgt := res.Destination()[0]
		if seen[tgt.Name] {
			t.Errorf("round %d: cold request went to %s again before every endpoint had one", i, tgt.Name)
		}
		seen[tgt.Name] = true
		s.Dispatch(req, res).Finish(profiles.Usage{})
	}
}

func TestScorerConfigErrors(t *testing.T) {
	base := "plugins:\n- type: %s\n  parameters: %s\nschedulingProfiles:\n- name: p\n  plugins: []\n"
	for _, c := range [][3]string{
		{"token-load-scorer", "{queueThresholdTokens: 0}", "queueThresholdTokens"},
		{"prefix-cache-scorer", "{matchLengthWeight: 2}", "matchLengthWeight"},
		{"prefix-cache-scorer", "{matchLengthScaleTokens: 0}", "matchLengthScaleTokens"},
		{"no-hit-lru-scorer", "{lruSize: 0}", "lruSize"},
		{"no-hit-lru-scorer", "{prefixPluginName: nope}", `"nope" names no plugin`},
	} {
		loadErr(t, fmt.Sprintf(base, c[0], c[1]), c[2])
	}
}

var _ = prefill.LoadOf
