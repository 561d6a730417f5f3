package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/gateway"
)

func init() { subcommands = append(subcommands, newGatewayCmd) }

func newGatewayCmd() *cobra.Command {
	var f pickerFlags
	var listen string
	var dialTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "gateway (--endpoints FILE | --pool-name NAME [--pool-namespace NS]) [--listen :8080] [--config FILE]",
		Short: "Run the picker with its own OpenAI-compatible HTTP gateway (no Envoy needed)",
		Long: `gateway runs the same scheduling pipeline as "serve" inside an HTTP reverse
proxy: clients send OpenAI requests (/v1/chat/completions, /v1/completions,
/v1/responses, ...) to --listen; each is scheduled and forwarded to the chosen
endpoint with the routing headers (x-prefiller-host-port, x-encoder-hosts-ports)
set. Responses, including SSE streams, are passed through and flushed chunk
by chunk. If connecting to the chosen endpoint fails before any byte was sent,
the next fallback endpoint is tried. Errors are answered in the OpenAI error
shape: 400 malformed body, 429 shed, 503 no ready endpoint, 502 unreachable.`,
		Example: `  spillway gateway --listen :8080 --endpoints endpoints.yaml
  curl -s localhost:8080/v1/chat/completions -H 'x-spillway-debug: 1' \
    -d '{"model":"m","messages":[{"role":"user","content":"hi"}]}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPicker(cmd, &f, func(ctx context.Context, st *director.Stack) error {
				ln, err := net.Listen("tcp", listen)
				if err != nil {
					return fmt.Errorf("gateway listener: %w", err)
				}
				slog.Info("gateway listening", "addr", ln.Addr().String())
				gw := gateway.New(st.Director, gateway.Options{DialTimeout: dialTimeout, Logger: slog.Default()})
				return director.ServeHTTP(ctx, ln, gw, 10*time.Second)
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&listen, "listen", ":8080", "address the gateway listens on")
	cmd.Flags().DurationVar(&dialTimeout, "dial-timeout", 2*time.Second, "timeout for connecting to an endpoint before the next fallback is tried")
	return cmd
}
