package prefill_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

const affinityConfig = `plugins:
- type: approx-prefix-cache-producer
  name: prefix
- type: inflight-load-producer
  name: load
- type: prefix-cache-affinity-filter
  name: affinity
  parameters: %s
- type: token-load-scorer
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: affinity}, {pluginRef: token-load-scorer}]
`

// warmPair returns a scheduler whose e0 caches the prompt and whose e0
// carries `gap` in-flight tokens more than e1.
func warmPair(t *testing.T, params string, gap int) (*profiles.Scheduler, []*profiles.Endpoint, *profiles.Request) {
	t.Helper()
	eps := endpoints(2)
	s := sched(t, fmt.Sprintf(affinityConfig, params), eps)
	prompt := ids(7, 4096)
	// Warm e0: schedule, then dispatch to e0 and finish.
	warm := request("m", prompt)
	if _, err := s.Schedule(context.Background(), warm); err != nil {
		t.Fatal(err)
	}
	s.Dispatch(warm, result("prefill", eps[0])).Finish(profiles.Usage{})
	// Book the gap on e0 (a request that never ends during the test).
	if gap > 0 {
		s.Dispatch(tokensOnly(gap), result("prefill", eps[0]))
	}
	req := request("m", prompt)
	if _, err := s.Schedule(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return s, eps, req
}

func decide(t *testing.T, s *profiles.Scheduler, req *profiles.Request, eps []*profiles.Endpoint) ([]*profiles.Endpoint, prefill.Decision) {
	t.Helper()
	f := plugin[*prefill.AffinityFilter](t, s, "affinity")
	return f.Decide(context.Background(), req, eps)
}

func TestAffinitySeedReleasePoint(t *testing.T) {
	cases := []struct {
		name, params string
		tau          int
	}{
		{"shipped interface 20480 tok/s × 14 s", `{peakPrefillThroughput: 20480, maxTTFTPenaltyMs: 14000}`, 286720},
		{"defaults 15928 tok/s × 18 s", `{}`, 286704},
		{"earlier interface maxTokensInFlightPenalty", `{maxTokensInFlightPenalty: 286720}`, 286720},
	}
	for _, c := range cases {
		for _, tc := range []struct {
			gap     int
			release bool
		}{{c.tau - 1, false}, {c.tau, false}, {c.tau + 1, true}, {286703, false}, {286721, true}} {
			t.Run(fmt.Sprintf("%s/gap=%d", c.name, tc.gap), func(t *testing.T) {
				s, eps, req := warmPair(t, c.params, tc.gap)
				if got := plugin[*prefill.AffinityFilter](t, s, "affinity").Calibration().TauTokens; got != float64(c.tau) {
					t.Fatalf("τ = %g, want %d", got, c.tau)
				}
				out, d := decide(t, s, req, eps)
				if d.Sticky != 1 {
					t.Fatalf("sticky set %d, want 1 (decision %+v)", d.Sticky, d)
				}
				if d.GapTokens != float64(tc.gap) {
					t.Errorf("gap %g, want %d", d.GapTokens, tc.gap)
				}
				if tc.release {
					if d.Outcome != "released" || len(out) != 2 {
						t.Errorf("want release (all pass), got %s with %d endpoints", d.Outcome, len(out))
					}
				} else if d.Outcome != "sticky" || len(out) != 1 || out[0] != eps[0] {
					t.Errorf("want sticky on e0, got %s with %v", d.Outcome, out)
				}
			})
		}
	}
}

func TestAffinityZeroPenaltyNeverReleases(t *testing.T) {
	for _, gap := range []int{1, 286721, 50_000_000} {
		s, eps, req := warmPair(t, `{maxTTFTPenaltyMs: 0}`, gap)
		out, d := decide(t, s, req, eps)
		if d.Outcome != "sticky" || len(out) != 1 {
			t.Errorf("gap %d: %s with %d endpoints, want sticky", gap, d.Outcome, len(out))
		}
	}
}

func TestAffinityShortSharedPromptNeverSticky(t *testing.T) {
	// Reasoning workload: a 250-token shared system prompt inside a
	// 1250-token request is 0.2 of the prompt < 0.8.
	eps := endpoints(4)
	s := sched(t, fmt.Sprintf(affinityConfig, `{affinityThreshold: 0.8}`), eps)
	shared := ids(1, 250)
	for i, ep := range eps {
		r := request("m", append(append([]uint32{}, shared...), ids(uint32(100+i), 1000)...))
		if _, err := s.Schedule(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		s.Dispatch(r, result("prefill", ep)).Finish(profiles.Usage{})
	}
	r := request("m", append(append([]uint32{}, shared...), ids(999, 1000)...))
	if _, err := s.Schedule(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	mb, tb, mt := prefill.MatchOf(r, eps[0])
	if mb != 250/16 || tb != 1250/16 || mt != 240 {
		t.Fatalf("match %d/%d blocks, %d tokens; want %d/%d, 240", mb, tb, mt, 250/16, 1250/16)
	}
	out, d := decide(t, s, r, eps)
	if d.Outcome != "no_sticky" || d.Sticky != 0 || len(out) != 4 {
		t.Errorf("got %+v with %d endpoints, want no_sticky and all 4", d, len(out))
	}
}

func TestAffinityOwnUncachedTokens(t *testing.T) {
	// The request is 40,960 tokens; e0 caches its keyed 32,768 (8,192
	// uncached) and has 40,000 tokens in flight; e1 caches nothing (40,960
	// uncached) and is idle. τ = 10,000 tokens. In-flight tokens alone: gap
	// 40,000 > τ → released. With the request's own uncached tokens:
	// (40,000 + 8,192) − 40,960 = 7,232 ≤ τ → stays sticky, because moving
	// the request to the cold endpoint would cost it the whole prompt.
	eps := endpoints(2)
	run := func(params string) prefill.Decision {
		s := sched(t, fmt.Sprintf(affinityConfig, params), eps)
		warm := request("m", ids(3, 32768))
		if _, err := s.Schedule(context.Background(), warm); err != nil {
			t.Fatal(err)
		}
		s.Dispatch(warm, result("prefill", eps[0])).Finish(profiles.Usage{})
		tr := s.Dispatch(tokensOnly(40000), result("prefill", eps[0]))
		defer tr.Finish(profiles.Usage{})
		r := request("m", append(ids(3, 32768), ids(4, 8192)...))
		if _, err := s.Schedule(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		_, d := decide(t, s, r, eps)
		return d
	}
	if d := run(`{maxTokensInFlightPenalty: 10000}`); d.Outcome != "released" || d.GapTokens != 40000 {
		t.Errorf("plain: %+v, want released with gap 40000", d)
	}
	if d := run(`{maxTokensInFlightPenalty: 10000, includeOwnUncachedTokens: true}`); d.Outcome != "sticky" || d.GapTokens != 40000+8192-40960 {
		t.Errorf("own tokens: %+v, want sticky with gap %d", d, 40000+8192-40960)
	}
}

func TestAffinityExplorationAndMetricsAndTrace(t *testing.T) {
	s, eps, req := warmPair(t, `{explorationProbability: 1}`, 0)
	req.SetDebug(true)
	f := plugin[*prefill.AffinityFilter](t, s, "affinity")
	out := f.Filter(context.Background(), &profiles.CycleState{Profile: "prefill"}, req, eps)
	if len(out) != 2 {
		t.Fatalf("exploration passed %d endpoints", len(out))
	}
	tr := req.Trace()
	found := false
	for _, e := range tr {
		found = found || (e.Plugin == "affinity" && strings.HasPrefix(e.Text, "explored: sticky set 1 of 2"))
	}
	if !found {
		t.Errorf("trace lacks the exploration decision: %+v", tr)
	}
}

func TestAffinityConfigErrors(t *testing.T) {
	base := "plugins:\n- type: prefix-cache-affinity-filter\n  parameters: %s\nschedulingProfiles:\n- name: p\n  plugins: [{pluginRef: prefix-cache-affinity-filter}]\n"
	for params, want := range map[string]string{
		`{maxTokensInFlightPenalty: 286720, maxTTFTPenaltyMs: 14000}`: "set one",
		`{affinityThreshold: 1.5}`:                                    "affinityThreshold",
		`{explorationProbability: -1}`:                                "explorationProbability",
		`{ttftSource: magic}`:                                         "ttftSource",
		`{ttftSource: latencyPredictor}`:                              "no predictor is configured",
		`{ttftSource: latencyPredictor, predictorRef: nope}`:          `"nope" names no plugin`,
		`{peakPrefillThroughput: 0}`:                                  "peakPrefillThroughput must be > 0",
		`{maxTTFTPenaltyMs: -1}`:                                      "maxTTFTPenaltyMs",
		`{affinityThresold: 0.8}`:                                     "unknown parameter",
		`{calibrationMatrix: m.yaml}`:                                 "go together",
	} {
		loadErr(t, fmt.Sprintf(base, params), want, "prefix-cache-affinity-filter")
	}
}

func TestAffinityDescribe(t *testing.T) {
	s := sched(t, fmt.Sprintf(affinityConfig, `{peakPrefillThroughput: 20480, maxTTFTPenaltyMs: 14000}`), endpoints(1))
	if d := s.Describe(); !strings.Contains(d, "τ = 286,720 tokens = 35 chunks of 8192 ≈ 14.0 s at 20,480 tok/s") {
		t.Errorf("describe lacks the calibration line:\n%s", d)
	}
	s = sched(t, fmt.Sprintf(affinityConfig, `{}`), endpoints(1))
	if d := s.Describe(); !strings.Contains(d, "τ = 286,704 tokens = 35.0 chunks of 8192 ≈ 18.0 s at 15,928 tok/s") {
		t.Errorf("describe lacks the default calibration line:\n%s", d)
	}
}
