package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/test/workloads"
)

// TestEveryQuickWorkloadCompletes runs round-robin on every quick workload
// on its own fleet (aggregated, P/D-free and E-P-D): every request is
// served and every level has latencies and a spread over the endpoints.
func TestEveryQuickWorkloadCompletes(t *testing.T) {
	for _, w := range workloads.Names() {
		if !strings.HasSuffix(w, "-quick") {
			continue
		}
		spec, _ := workloads.Load(w)
		cfg := "k8-round-robin"
		fl, err := LoadFleet(spec.Fleet)
		if err != nil {
			t.Fatal(err)
		}
		if fl.Disaggregated() {
			cfg = "epd-all-round-robin"
		}
		res := quickResults(t, w, cfg)
		for _, l := range res.Configs[0].Levels {
			if l.Failed > 0 || l.Completed != l.Requests || l.Requests == 0 {
				t.Errorf("%s at %g: %d of %d completed, %d failed", w, l.Load, l.Completed, l.Requests, l.Failed)
			}
			if l.TTFTMs.P50 <= 0 || l.E2EMs.P90 < l.TTFTMs.P90 || l.InputTokensPerSec <= 0 {
				t.Errorf("%s at %g: implausible latencies %+v", w, l.Load, l)
			}
			if len(l.RequestsPerEndpoint) < 2 || l.Imbalance < 1 {
				t.Errorf("%s at %g: endpoints %v imbalance %g", w, l.Load, l.RequestsPerEndpoint, l.Imbalance)
			}
		}
	}
}

// TestSaturationReleasesAreCounted uses a hair-trigger release (τ = 2048
// tokens): the releases column must count the filter's released decisions.
func TestSaturationReleasesAreCounted(t *testing.T) {
	needPlugins(t, matchedTypes...)
	spec, _ := workloads.Load("b2b-saas-quick")
	fl, _ := LoadFleet(spec.Fleet)
	hair, err := LoadConfig("testdata/hair-trigger-release.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tla, _ := LoadConfig("token-load-aware")
	res, err := Run(context.Background(), Options{Workload: spec, Fleet: fl, Configs: []*Config{tla, hair}, Baseline: "token-load-aware"})
	if err != nil {
		t.Fatal(err)
	}
	sum := func(c ConfigResult) float64 {
		n := 0.0
		for _, l := range c.Levels {
			n += l.SaturationReleases
		}
		return n
	}
	if res.Configs[1].Error != "" {
		t.Fatal(res.Configs[1].Error)
	}
	if got := sum(res.Configs[1]); got == 0 {
		t.Fatal("hair-trigger release never counted")
	}
	if sum(res.Configs[1]) <= sum(res.Configs[0]) {
		t.Fatalf("releases: τ=2048 %g ≤ τ=286720 %g", sum(res.Configs[1]), sum(res.Configs[0]))
	}
	if res.Baseline != "token-load-aware" || res.Configs[0].Knee.RatioVsBaseline != 1 {
		t.Fatalf("baseline %s ratio %g", res.Baseline, res.Configs[0].Knee.RatioVsBaseline)
	}
}
