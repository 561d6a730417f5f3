package prefill_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spillway-llm/spillway/profiles"
)

// TestMetrics runs decisions through the scheduler and reads the series
// from its registry.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	eps := endpoints(2)
	s, err := profiles.LoadConfigBytes("test.yaml", []byte("apiVersion: llm-d.ai/v1alpha1\n"+fmt.Sprintf(affinityConfig, `{maxTokensInFlightPenalty: 1000}`)),
		profiles.Options{Endpoints: profiles.EndpointList(eps), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	run := func(r *profiles.Request) *profiles.Result {
		res, err := s.Schedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cold := request("m", ids(1, 160))
	run(cold) // no_sticky
	s.Dispatch(cold, result("prefill", eps[0])).Finish(profiles.Usage{})
	run(request("m", ids(1, 160))) // sticky (no load)
	held := s.Dispatch(tokensOnly(5000), result("prefill", eps[0]))
	run(request("m", ids(1, 160))) // released: gap 5000 > 1000
	want := `
# HELP spillway_affinity_decisions_total prefix-cache-affinity-filter decisions: sticky (only warm endpoints passed), released (saturation release passed all), no_sticky (no warm endpoint), explored (exploration passed all).
# TYPE spillway_affinity_decisions_total counter
spillway_affinity_decisions_total{filter="affinity",outcome="explored"} 0
spillway_affinity_decisions_total{filter="affinity",outcome="no_sticky"} 1
spillway_affinity_decisions_total{filter="affinity",outcome="released"} 1
spillway_affinity_decisions_total{filter="affinity",outcome="sticky"} 1
# HELP spillway_inflight_tokens Tokens booked by the router on an endpoint and not yet released: uncached prompt tokens until prefill ends, plus the output estimate when enabled.
# TYPE spillway_inflight_tokens gauge
spillway_inflight_tokens{endpoint="e0"} 5000
# HELP spillway_inflight_requests Requests dispatched to an endpoint and not yet finished.
# TYPE spillway_inflight_requests gauge
spillway_inflight_requests{endpoint="e0"} 1
# HELP spillway_prefix_index_blocks Block entries held by a prefix index, summed over endpoints.
# TYPE spillway_prefix_index_blocks gauge
spillway_prefix_index_blocks{producer="prefix"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "spillway_affinity_decisions_total", "spillway_inflight_tokens", "spillway_inflight_requests", "spillway_prefix_index_blocks"); err != nil {
		t.Error(err)
	}
	// Hit ratio: 10 lookups per request × 3, hits 0 + 10 + 10.
	if n := testutil.CollectAndCount(reg, "spillway_prefix_lookup_blocks_total", "spillway_prefix_hit_blocks_total"); n != 2 {
		t.Errorf("%d hit-ratio series", n)
	}
	held.Finish(profiles.Usage{})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP spillway_inflight_tokens Tokens booked by the router on an endpoint and not yet released: uncached prompt tokens until prefill ends, plus the output estimate when enabled.
# TYPE spillway_inflight_tokens gauge
spillway_inflight_tokens{endpoint="e0"} 0
`), "spillway_inflight_tokens"); err != nil {
		t.Error(err)
	}
}
