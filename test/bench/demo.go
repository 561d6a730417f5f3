package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spillway-llm/spillway/test/workloads"
)

// DemoOptions configure `spillway demo`.
type DemoOptions struct {
	Out       string  // directory for results.json and report.html
	TimeScale float64 // simulated seconds per wall second (default 8)
	Configs   string  // default: round-robin vs the matched configuration
	// Workload replaces the shipped demo workload (tests use a shorter one).
	Workload *workloads.Spec
}

// DemoConfigs is the demo's comparison on its E-P-D fleet: every pool
// round-robin (the Kubernetes Service baseline) against every pool matched
// (encode on queue depth, prefill on affinity + token load, decode on
// active requests).
const DemoConfigs = "epd-all-round-robin,epd-matched"

// RunDemo starts simulated endpoints on loopback behind the picker's
// gateway, plays the demo workload once per configuration, prints the
// table and returns the report's path.
func RunDemo(ctx context.Context, o DemoOptions, stdout, stderr io.Writer) (string, error) {
	if o.TimeScale <= 0 {
		o.TimeScale = 4
	}
	if o.Configs == "" {
		o.Configs = DemoConfigs
	}
	start := time.Now()
	fmt.Fprintf(stdout, "spillway demo: simulated E-P-D fleet on 127.0.0.1 (1 encoder, 2 prefill, 2 decode behind kvtransfer sidecars), the picker's gateway in front, workload %q at %g× speed\n", "demo", o.TimeScale)
	_, report, err := RunCommand(ctx, CommandOptions{Workload: "demo", Spec: o.Workload, Fleet: "demo", Configs: o.Configs, Out: o.Out, Real: true, TimeScale: o.TimeScale}, stdout, stderr)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "\ndone in %v; open %s in a browser\n", time.Since(start).Round(100*time.Millisecond), report)
	return report, nil
}
