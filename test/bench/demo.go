package bench

import (
	"context"
	"fmt"
	"io"
	"time"
)

// DemoOptions configure `spillway demo`.
type DemoOptions struct {
	Out       string  // directory for results.json and report.html
	TimeScale float64 // simulated seconds per wall second (default 8)
	Configs   string  // default: round-robin vs the matched configuration
}

// DemoConfigs is the demo's comparison: the Kubernetes Service baseline
// against the matched prefill-bound configuration.
const DemoConfigs = "k8-round-robin,token-load-aware"

// RunDemo starts simulated endpoints on loopback behind the picker's
// gateway, plays the demo workload once per configuration, prints the
// table and returns the report's path.
func RunDemo(ctx context.Context, o DemoOptions, stdout, stderr io.Writer) (string, error) {
	if o.TimeScale <= 0 {
		o.TimeScale = 8
	}
	if o.Configs == "" {
		o.Configs = DemoConfigs
	}
	start := time.Now()
	fmt.Fprintf(stdout, "spillway demo: simulated fleet %q on 127.0.0.1, the picker's gateway in front, workload %q at %g× speed\n", "demo", "demo", o.TimeScale)
	_, report, err := RunCommand(ctx, CommandOptions{Workload: "demo", Fleet: "demo", Configs: o.Configs, Out: o.Out, Real: true, TimeScale: o.TimeScale}, stdout, stderr)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "\ndone in %v; open %s in a browser\n", time.Since(start).Round(100*time.Millisecond), report)
	return report, nil
}
