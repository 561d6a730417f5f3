package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/test/workloads"
)

// TestRealHTTPRoundRobin drives the demo workload over real HTTP through the
// gateway to simulators on loopback and checks that every request was
// served, spread evenly, with measured latencies.
func TestRealHTTPRoundRobin(t *testing.T) {
	if testing.Short() {
		t.Skip("real HTTP run")
	}
	spec, err := workloads.Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	spec.Arrival.Levels = spec.Arrival.Levels[:2]
	spec.Arrival.DurationSeconds = 4
	spec.Conversations.Images = nil
	fl, _ := LoadFleet("h100-x4")
	c, _ := LoadConfig("k8-round-robin")
	res, err := RunReal(context.Background(), Options{Workload: spec, Fleet: fl, Configs: []*Config{c}}, RealOptions{TimeScale: 8})
	if err != nil {
		t.Fatal(err)
	}
	cr := res.Configs[0]
	if cr.Error != "" {
		t.Fatal(cr.Error)
	}
	for _, l := range cr.Levels {
		if l.Requests == 0 || l.Failed != 0 || l.Completed != l.Requests {
			t.Fatalf("level %g: %d requests, %d failed, %d completed", l.Load, l.Requests, l.Failed, l.Completed)
		}
		if l.TTFTMs.P50 <= 0 || l.InputTokensPerSec <= 0 {
			t.Fatalf("level %g: no latencies measured: %+v", l.Load, l)
		}
		n := 0
		for _, v := range l.RequestsPerEndpoint {
			n += v
		}
		if n == 0 || len(l.RequestsPerEndpoint) != 4 {
			t.Fatalf("level %g: per-endpoint counts %v", l.Load, l.RequestsPerEndpoint)
		}
	}
	t.Logf("%+v", cr.Levels)
}

// TestDemoRuns is `spillway demo`: over real HTTP through the gateway and
// the decode sidecars, both configurations served every request of the
// E-P-D fleet (encoder, prefill and decode legs) and the report was
// written.
func TestDemoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("real HTTP run")
	}
	needPlugins(t, matchedTypes...)
	// The shipped demo's first two stages, shortened: the full ramp is for
	// people, this checks the plumbing.
	spec, err := workloads.Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	spec.Arrival.Levels = spec.Arrival.Levels[:2]
	spec.Arrival.DurationSeconds = 4
	var out, errw strings.Builder
	dir := t.TempDir()
	report, err := RunDemo(context.Background(), DemoOptions{Out: dir, Workload: spec}, &out, &errw)
	if err != nil {
		t.Fatalf("%v\n%s", err, errw.String())
	}
	if _, err := os.Stat(report); err != nil {
		t.Fatal(err)
	}
	res, err := ReadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Configs) != 2 || res.Mode != "real" {
		t.Fatalf("%d configurations, mode %s", len(res.Configs), res.Mode)
	}
	for _, c := range res.Configs {
		if c.Error != "" {
			t.Fatalf("%s: %s", c.Name, c.Error)
		}
		for _, l := range c.Levels {
			if l.Failed > 0 || l.Completed == 0 {
				t.Fatalf("%s at %g qps: %d failed of %d", c.Name, l.Load, l.Failed, l.Requests)
			}
		}
	}
	if !strings.Contains(out.String(), "epd-matched") || !strings.Contains(out.String(), report) {
		t.Fatalf("demo output lacks the table or the report path:\n%s", out.String())
	}
}
