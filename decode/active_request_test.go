package decode_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/spillway-llm/spillway/decode"
	"github.com/spillway-llm/spillway/profiles"
)

func decodePool(n int) profiles.EndpointList {
	var eps profiles.EndpointList
	for i := range n {
		eps = append(eps, profiles.NewEndpoint(i, fmt.Sprintf("d%d", i), fmt.Sprintf("10.0.0.%d:8000", i+1), map[string]string{profiles.RoleLabel: "decode"}))
	}
	return eps
}

func sched(t *testing.T, params string, eps profiles.EndpointList) (*profiles.Scheduler, *decode.ActiveRequestScorer) {
	t.Helper()
	cfg := `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: active-request-scorer
  parameters: ` + params + `
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: active-request-scorer}]
`
	s, err := profiles.LoadConfigBytes("t.yaml", []byte(cfg), profiles.Options{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	p, _ := s.Plugin("active-request-scorer")
	return s, p.(*decode.ActiveRequestScorer)
}

func req(t *testing.T) *profiles.Request {
	r, err := profiles.ParseRequest(profiles.PathCompletions, map[string]string{}, []byte(`{"prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestActiveRequestScorerBooksAndReleases(t *testing.T) {
	eps := decodePool(3)
	s, sc := sched(t, `{}`, eps)
	ctx := context.Background()
	var trackers []*profiles.Tracker
	// Three requests spread over the three idle endpoints: each booked one
	// makes its endpoint lose to the idle ones.
	seen := map[string]bool{}
	for range 3 {
		r := req(t)
		res, err := s.Schedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		seen[res.DestinationValue()] = true
		trackers = append(trackers, s.Dispatch(r, res))
	}
	if len(seen) != 3 {
		t.Fatalf("3 requests went to %d endpoints; the in-flight counts must spread them", len(seen))
	}
	for _, e := range eps {
		if sc.InFlight(e) != 1 {
			t.Errorf("%s in flight %d, want 1", e.Name, sc.InFlight(e))
		}
	}
	trackers[0].Finish(profiles.Usage{})
	trackers[1].Fail(context.Canceled)
	trackers[1].Fail(context.Canceled) // idempotent
	total := 0
	for _, e := range eps {
		total += sc.InFlight(e)
	}
	if total != 1 {
		t.Errorf("after one finish and one failure %d in flight, want 1", total)
	}
	trackers[2].Finish(profiles.Usage{})
	for _, e := range eps {
		if sc.InFlight(e) != 0 {
			t.Errorf("%s leaked %d", e.Name, sc.InFlight(e))
		}
	}
}

func TestActiveRequestScorerFormula(t *testing.T) {
	eps := decodePool(3)
	s, sc := sched(t, `{idleThreshold: 1, maxBusyScore: 0.5}`, eps)
	// Book 1, 2 and 4 requests directly through the hooks.
	book := func(ep *profiles.Endpoint, n int) {
		for range n {
			r := req(t)
			res := &profiles.Result{Primary: "decode", Profiles: map[string]*profiles.ProfileResult{"decode": {Profile: "decode", Targets: []*profiles.Endpoint{ep}}}}
			s.Dispatch(r, res)
		}
	}
	out := make([]float64, 3)
	sc.Score(context.Background(), &profiles.CycleState{Profile: "decode"}, req(t), eps, out) // learns its profile
	book(eps[0], 1)
	book(eps[1], 2)
	book(eps[2], 4)
	sc.Score(context.Background(), &profiles.CycleState{Profile: "decode"}, req(t), eps, out)
	want := []float64{1, (4.0 - 2) / 4 * 0.5, 0}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("score[%d] = %g, want %g (counts 1,2,4; idle ≤ 1; maxBusyScore 0.5)", i, out[i], want[i])
		}
	}
	// A removed endpoint's late releases do not touch a newcomer that
	// reuses its index.
	s.OnEndpointRemoved(eps[2])
	if sc.InFlight(eps[2]) != 0 {
		t.Error("removed endpoint still counted")
	}
	newcomer := profiles.NewEndpoint(2, "d2b", "10.0.0.9:8000", map[string]string{profiles.RoleLabel: "decode"})
	if sc.InFlight(newcomer) != 0 {
		t.Error("newcomer inherited the old endpoint's count")
	}
}

func TestActiveRequestScorerParams(t *testing.T) {
	for _, p := range []string{`{maxBusyScore: 2}`, `{idleThreshold: -1}`, `{bogus: 1}`} {
		cfg := "apiVersion: llm-d.ai/v1alpha1\nplugins:\n- type: active-request-scorer\n  parameters: " + p + "\nschedulingProfiles:\n- name: d\n  plugins: [{pluginRef: active-request-scorer}]\n"
		if _, err := profiles.LoadConfigBytes("t.yaml", []byte(cfg), profiles.Options{}); err == nil {
			t.Errorf("%s accepted", p)
		}
	}
}

func BenchmarkActiveRequestScorer64(b *testing.B) {
	eps := decodePool(64)
	cfg := "apiVersion: llm-d.ai/v1alpha1\nplugins:\n- type: active-request-scorer\nschedulingProfiles:\n- name: d\n  plugins: [{pluginRef: active-request-scorer}]\n"
	s, err := profiles.LoadConfigBytes("t.yaml", []byte(cfg), profiles.Options{Endpoints: eps})
	if err != nil {
		b.Fatal(err)
	}
	p, _ := s.Plugin("active-request-scorer")
	sc := p.(profiles.Scorer)
	out := make([]float64, len(eps))
	r, _ := profiles.ParseRequest(profiles.PathCompletions, map[string]string{}, []byte(`{"prompt":"x"}`))
	cs := &profiles.CycleState{Profile: "d"}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		sc.Score(context.Background(), cs, r, eps, out)
	}
}
