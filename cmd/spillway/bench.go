package main

import (
	"errors"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/test/bench"
	"github.com/spillway-llm/spillway/test/workloads"
)

func init() { subcommands = append(subcommands, newBenchCmd) }

func newBenchCmd() *cobra.Command {
	var o bench.CommandOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark scheduler configurations against round-robin on a simulated fleet",
		Long: `bench plays a workload against a simulated vLLM fleet once per scheduler
configuration and load level, and compares the configurations with the
round-robin baseline (the Kubernetes Service).

By default it runs in virtual time: the simulator's event loop drives the real
scheduler and plugins, so a load ramp of many minutes takes seconds and the
results are the same for the same --seed. --real instead starts simulators
speaking HTTP on loopback and sends the workload through the picker's gateway
(wall clock, sped up by --time-scale; not bit-for-bit repeatable); decode
endpoints of P/D and E-P-D fleets get the kvtransfer sidecar in front.

For every (configuration, load level) it reports TTFT p50/p90/p99, TPOT p90,
end-to-end p90, input and output tokens/s, goodput against the workload's SLOs,
prefix-cache hit rate, requests per endpoint (imbalance) and saturation-release
firings; per configuration the knee (the highest load level whose knee metric,
TTFT p90 unless the workload says otherwise, stays within the bound) and the
throughput ratio against round-robin at the knee. It prints a table and, with
--out, writes results.json and a self-contained report.html.

Shipped workloads: ` + strings.Join(workloads.Names(), ", ") + `
Shipped fleets:    ` + strings.Join(bench.FleetNames(), ", ") + `
Shipped configs:   ` + strings.Join(bench.ConfigNames(), ", "),
		Example: `  spillway bench --workload b2b-saas-quick --out /tmp/b2b
  spillway bench --workload code-generation --fleet h100-x10 --configs k8-round-robin,token-load-aware --out out/cg
  spillway bench --workload mixed-bursty-quick --fleet pd-h100 --configs pd-all-round-robin,pd-matched
  spillway bench --workload my-workload.yaml --fleet my-fleet.yaml --configs k8-round-robin,./my-config.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C stops the run between events and closes what it started.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if o.Workload == "" {
				return errors.New("--workload is required (a shipped name or a YAML file)")
			}
			_, _, err := bench.RunCommand(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Workload, "workload", "", "workload: a shipped name or a workload YAML file (required)")
	f.StringVar(&o.Fleet, "fleet", "", "fleet: a shipped name or a fleet YAML file (default: the workload's fleet)")
	f.StringVar(&o.Configs, "configs", "", "comma-separated configurations: shipped names or EndpointPickerConfig files (default: "+bench.DefaultConfigs+"; the per-pool stacks on a P/D or E-P-D fleet)")
	f.StringVar(&o.Out, "out", "", "directory for results.json and report.html (default: table only)")
	f.Uint64Var(&o.Seed, "seed", 0, "random seed for the workload and the pickers (default: the workload's seed)")
	f.StringVar(&o.Baseline, "baseline", "", "configuration the ratios compare against (default: the round-robin one)")
	f.Float64Var(&o.KneeBoundMs, "knee-bound-ms", 0, "bound on the knee metric in ms (default: the workload's knee.boundMs)")
	f.IntVar(&o.Parallel, "parallel", 1, "configurations to run at once (results do not depend on it)")
	f.BoolVar(&o.Real, "real", false, "drive real-HTTP simulators on loopback through the picker's gateway (and a kvtransfer sidecar per decode endpoint of a P/D or E-P-D fleet) instead of virtual time; wall clock, not bit-for-bit repeatable")
	f.Float64Var(&o.TimeScale, "time-scale", 4, "with --real: simulated seconds per wall second (latencies are reported in simulated time)")
	return cmd
}
