// Command spillway is the endpoint picker, gateway, decode sidecar, simulator
// and benchmark harness for disaggregated LLM serving.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// subcommands is filled by each subcommand's file in init, so that adding a
// subcommand touches only its own file.
var subcommands []func() *cobra.Command

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "spillway",
		Short: "Endpoint picker for disaggregated (P/D, E-P-D) LLM serving",
		Long: `spillway picks an encoder, a prefill and a decode endpoint for every request
sent to a vLLM fleet: sticky on the prefill endpoint that caches the prompt's
prefix until it saturates, then spilling by token load. It runs behind Envoy
(ext_proc, "serve") or as its own OpenAI-compatible gateway ("gateway"), and
ships the decode-pod sidecar, a vLLM simulator and a benchmark harness.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, mk := range subcommands {
		root.AddCommand(mk())
	}
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "spillway:", err)
		os.Exit(1)
	}
}
