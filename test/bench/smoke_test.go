package bench

import (
	"context"
	"os"
	"testing"

	"github.com/spillway-llm/spillway/test/workloads"
)

func TestSmokeRoundRobin(t *testing.T) {
	for _, w := range []string{"b2b-saas-quick", "code-generation-quick", "reasoning-quick"} {
		spec, err := workloads.Load(w)
		if err != nil {
			t.Fatal(err)
		}
		fl, err := LoadFleet(spec.Fleet)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := LoadConfig("k8-round-robin")
		res, err := Run(context.Background(), Options{Workload: spec, Fleet: fl, Configs: []*Config{c}})
		if err != nil {
			t.Fatal(err)
		}
		res.WriteTable(os.Stdout)
	}
}
