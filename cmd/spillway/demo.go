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
		Short: "Run a one-minute comparison of round-robin vs the matched configuration on a simulated fleet",
		Long: `demo starts, in this one process and on loopback only, a small fleet of
simulated vLLM endpoints speaking real HTTP, the picker's OpenAI-compatible
gateway in front of them, and a load generator. It plays a miniature b2b-saas
workload (shared system prompts, a short QPS ramp) once with round-robin (the
Kubernetes Service baseline) and once with the matched prefill-bound
configuration (prefix-cache affinity filter + token-load scorer), prints the
comparison table and writes results.json and report.html. Nothing is needed
beyond this binary; it finishes in well under a minute.`,
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
