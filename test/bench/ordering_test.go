package bench

import (
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/profiles"
)

// needPlugins skips when a configuration's plugin types are not built in
// yet, naming what is missing.
func needPlugins(t *testing.T, types ...string) {
	t.Helper()
	var missing []string
	for _, ty := range types {
		if _, ok := profiles.Lookup(ty); !ok {
			missing = append(missing, ty)
		}
	}
	if len(missing) > 0 {
		t.Skipf("skipping: plugin types not registered in this build: %s", strings.Join(missing, ", "))
	}
}

var matchedTypes = []string{"approx-prefix-cache-producer", "inflight-load-producer", "prefix-cache-affinity-filter", "token-load-scorer", "active-request-scorer"}

func kneeOf(t *testing.T, res *Results, name string) Knee {
	t.Helper()
	for _, c := range res.Configs {
		if c.Name == name {
			if c.Error != "" {
				t.Fatalf("%s did not run: %s", name, c.Error)
			}
			return c.Knee
		}
	}
	t.Fatalf("no results for %s", name)
	return Knee{}
}

func logTable(t *testing.T, res *Results) {
	var b strings.Builder
	res.WriteTable(&b)
	t.Log("\n" + b.String())
}

// The seed's claims, in virtual time: on prefill-bound workloads the
// token-load-aware configuration sustains more input throughput than
// round-robin at its knee; on the decode-bound one active-request-aware is
// at parity or better.
func TestTokenLoadAwareBeatsRoundRobinOnB2BSaaSQuick(t *testing.T) {
	needPlugins(t, matchedTypes...)
	res := quickResults(t, "b2b-saas-quick", "k8-round-robin", "token-load-aware")
	logTable(t, res)
	rr, tla := kneeOf(t, res, "k8-round-robin"), kneeOf(t, res, "token-load-aware")
	if !(tla.RatioVsBaseline > 1.2) || tla.Load < rr.Load {
		t.Fatalf("token-load-aware knee %g at %.0f tok/s (%.2f× round-robin's %g at %.0f), want ahead", tla.Load, tla.Throughput, tla.RatioVsBaseline, rr.Load, rr.Throughput)
	}
}

func TestTokenLoadAwareBeatsRoundRobinOnCodeGenerationQuick(t *testing.T) {
	needPlugins(t, matchedTypes...)
	res := quickResults(t, "code-generation-quick", "k8-round-robin", "token-load-aware")
	logTable(t, res)
	rr, tla := kneeOf(t, res, "k8-round-robin"), kneeOf(t, res, "token-load-aware")
	if !(tla.RatioVsBaseline > 1.2) || tla.Load < rr.Load {
		t.Fatalf("token-load-aware knee %g at %.0f tok/s (%.2f× round-robin's %g at %.0f), want ahead", tla.Load, tla.Throughput, tla.RatioVsBaseline, rr.Load, rr.Throughput)
	}
}

func TestActiveRequestAwareAtParityOnReasoningQuick(t *testing.T) {
	needPlugins(t, matchedTypes...)
	res := quickResults(t, "reasoning-quick", "k8-round-robin", "active-request-aware")
	logTable(t, res)
	rr, ara := kneeOf(t, res, "k8-round-robin"), kneeOf(t, res, "active-request-aware")
	if !(ara.RatioVsBaseline >= 0.95) || ara.Load < rr.Load {
		t.Fatalf("active-request-aware knee %g at %.0f tok/s (%.2f× round-robin's %g), want parity or better", ara.Load, ara.Throughput, ara.RatioVsBaseline, rr.Load)
	}
}

// TestVirtualRunsAreDeterministic runs the same benchmark twice: a seed
// fixes every arrival, every token and every random pick.
func TestVirtualRunsAreDeterministic(t *testing.T) {
	cfgs := []string{"k8-round-robin"}
	if _, ok := profiles.Lookup("prefix-cache-affinity-filter"); ok {
		cfgs = append(cfgs, "token-load-aware")
	}
	a := quickResults(t, "mixed-bursty-quick", cfgs...)
	b := quickResults(t, "mixed-bursty-quick", cfgs...)
	var ja, jb strings.Builder
	a.WriteTable(&ja)
	b.WriteTable(&jb)
	if ja.String() != jb.String() {
		t.Fatalf("two runs differ:\n%s\n%s", ja.String(), jb.String())
	}
}
