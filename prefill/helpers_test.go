package prefill_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// endpoints returns n prefill endpoints e0..e(n-1) on 127.0.0.1.
func endpoints(n int) []*profiles.Endpoint {
	eps := make([]*profiles.Endpoint, n)
	for i := range eps {
		eps[i] = profiles.NewEndpoint(i, fmt.Sprintf("e%d", i), fmt.Sprintf("127.0.0.1:%d", 8000+i), map[string]string{profiles.RoleLabel: profiles.RolePrefill})
	}
	return eps
}

// sched builds a scheduler from a config body (plugins + profiles), with
// eps as the pool.
func sched(t testing.TB, body string, eps []*profiles.Endpoint) *profiles.Scheduler {
	t.Helper()
	s, err := profiles.LoadConfigBytes("test.yaml", []byte("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"+body),
		profiles.Options{Endpoints: profiles.EndpointList(eps)})
	if err != nil {
		t.Fatalf("config rejected: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func loadErr(t *testing.T, body string, wants ...string) {
	t.Helper()
	s, err := profiles.LoadConfigBytes("test.yaml", []byte("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"+body), profiles.Options{})
	if err == nil {
		s.Close()
		t.Fatalf("config accepted, want error containing %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

func plugin[T any](t testing.TB, s *profiles.Scheduler, name string) T {
	t.Helper()
	p, ok := s.Plugin(name)
	if !ok {
		t.Fatalf("no plugin %q", name)
	}
	v, ok := p.(T)
	if !ok {
		t.Fatalf("plugin %q is %T", name, p)
	}
	return v
}

// ids returns n token ids; ids with the same base share a prefix.
func ids(base uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base*1_000_003 + uint32(i)
	}
	return out
}

// request returns a counted request with the given token ids.
func request(model string, toks []uint32) *profiles.Request {
	r := &profiles.Request{ID: "r", Model: model}
	r.Tokens = profiles.TokenCounts{Text: len(toks), Weighted: float64(len(toks)), IDs: toks, Counted: true}
	return r
}

// tokensOnly is a request with a token count but no ids (no prefix match).
func tokensOnly(n int) *profiles.Request {
	r := &profiles.Request{ID: "load"}
	r.Tokens = profiles.TokenCounts{Text: n, Weighted: float64(n), Counted: true}
	return r
}

func result(profile string, ep *profiles.Endpoint) *profiles.Result {
	return &profiles.Result{Primary: profile, Profiles: map[string]*profiles.ProfileResult{profile: {Profile: profile, Targets: []*profiles.Endpoint{ep}}}}
}

func load(ep *profiles.Endpoint) (int64, int64) { return prefill.LoadOf(ep) }

var _ = context.Background
