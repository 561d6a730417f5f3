package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/test/bench"
)

func init() { subcommands = append(subcommands, newDemoCmd) }

func newDemoCmd() *cobra.Command {
	var o bench.DemoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Compare round-robin with the matched per-pool stacks on a simulated E-P-D fleet, in under a minute",
		Long: `demo starts, in this one process and on loopback only, a small simulated
E-P-D fleet speaking real HTTP (one encoder, two prefill and two decode vLLM
simulators, a kvtransfer sidecar in front of each decode endpoint), the
picker's OpenAI-compatible gateway in front of them, and a load generator. It
plays a miniature b2b-saas workload with one image per request (shared system
prompts, a short QPS ramp) once with every pool round-robin (the Kubernetes
Service baseline) and once with every pool matched (encode on queue depth,
prefill on prefix-cache affinity + token load, decode on active requests),
prints the comparison table and writes results.json and report.html. Nothing
is needed beyond this binary; it finishes in well under a minute.`,
		Example: `  spillway demo
  spillway demo --out /tmp/spillway-demo`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C stops the run between events and closes what it started.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if o.Out == "" {
				o.Out = filepath.Join(os.TempDir(), "spillway-demo")
			}
			_, err := bench.RunDemo(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", "", "directory for results.json and report.html (default: $TMPDIR/spillway-demo)")
	f.Float64Var(&o.TimeScale, "time-scale", 4, "simulated seconds per wall second (lower it on a busy machine: the simulators run on the wall clock)")
	f.StringVar(&o.Configs, "configs", bench.DemoConfigs, "configurations to compare (shipped names or files)")
	return cmd
}
