package director_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

// benchStore returns n decode endpoints with varied metrics.
func benchStore(n int) *discovery.Store {
	st := discovery.NewStore()
	specs := make([]discovery.Spec, n)
	for i := range specs {
		specs[i] = discovery.Spec{Name: fmt.Sprintf("decode-%04d", i), Address: fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250), Labels: map[string]string{profiles.RoleLabel: profiles.RoleDecode}}
	}
	st.Update(specs)
	for i, e := range st.Endpoints() {
		e.SetMetrics(&profiles.Metrics{WaitingQueue: (i * 7) % 13, Running: i % 5, KVUsage: float64((i*31)%100) / 100})
	}
	return st
}

// BenchmarkPickWithFallbacks is one scheduling decision with the built-in
// config (decode-filter, queue-scorer, kv-cache-utilization-scorer,
// max-score-picker returning the target and 2 fallbacks) over n endpoints;
// the request is parsed once outside the loop, as the front doors do.
func BenchmarkPickWithFallbacks(b *testing.B) {
	for _, n := range []int{5, 25, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s, err := director.LoadScheduler("", profiles.Options{Endpoints: benchStore(n)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			req, err := profiles.ParseRequest("/v1/chat/completions", map[string]string{}, []byte(chatBody))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Schedule(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPick is the one-profile pick of the target: the same
// chain with max-score-picker's default maxNumOfEndpoints 1 (no fallback
// list), over n endpoints.
func BenchmarkPick(b *testing.B) {
	cfg := `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: decode-filter
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}, {pluginRef: kv-cache-utilization-scorer}, {pluginRef: max-score-picker}]
`
	for _, n := range []int{5, 25, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			s, err := profiles.LoadConfigBytes("bench", []byte(cfg), profiles.Options{Endpoints: benchStore(n)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			req, _ := profiles.ParseRequest("/v1/chat/completions", map[string]string{}, []byte(chatBody))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Schedule(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoute is the whole director path for a small chat request over
// 100 endpoints: parse, schedule, dispatch, response observation, finish.
func BenchmarkRoute(b *testing.B) {
	s, err := director.LoadScheduler("", profiles.Options{Endpoints: benchStore(100)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d := director.New(s, director.Options{})
	ctx := context.Background()
	body := []byte(chatBody)
	ev := []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	get := func(k string) string {
		if k == "content-type" {
			return "text/event-stream"
		}
		return ""
	}
	b.ReportAllocs()
	for b.Loop() {
		x, err := d.Route(ctx, director.Inbound{Method: "POST", Path: "/v1/chat/completions", Headers: map[string]string{"content-type": "application/json"}, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		x.ResponseHeaders(200, get)
		x.ResponseBody(ev, true)
	}
}
