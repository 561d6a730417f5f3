package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/discovery/kubernetes"
	"github.com/spillway-llm/spillway/kvtransfer"
)

func init() { subcommands = append(subcommands, newSidecarCmd) }

func newSidecarCmd() *cobra.Command {
	var o kvtransfer.RunOptions
	var port int
	var kf kubernetes.Flags
	cmd := &cobra.Command{
		Use:   "sidecar --decoder http://127.0.0.1:8200 [--port 8000] (--allow HOST:PORT,... | --allow-file FILE | --pool-name NAME)",
		Short: "Run the decode pod's KV-handoff sidecar (encode → prefill → decode with vLLM NixlConnector parameters)",
		Long: `sidecar is the HTTP front of a decode pod. For POST /v1/chat/completions,
/v1/completions and /v1/responses it reads the picker's routing headers:

  x-encoder-hosts-ports  one encoder leg per multimodal item (item i to entry
                         i mod len), in parallel; their ec_transfer_params are
                         merged and sent with the prefill leg (or the decode
                         leg when there is no prefiller). A failed encoder leg
                         is skipped.
  x-prefiller-host-port  prefill leg: the client's body with kv_transfer_params
                         {do_remote_decode: true, ...}, stream false,
                         stream_options removed, max_tokens (max_output_tokens
                         on /v1/responses; max_completion_tokens and min_tokens
                         when present) 1, same x-request-id; retried on
                         502/503/504 and connection errors. If it fails or
                         times out the decoder prefills locally and the
                         response says x-spillway-prefill: fallback-local.

The decode leg goes to --decoder with the original body plus the returned
kv_transfer_params; streams are relayed event by event and usage
cached_tokens is rewritten to the prefill leg's value. The response carries
x-spillway-prefill-done-ms (prefill leg duration) so the picker releases the
prefill endpoint's load. Every other path is proxied to the decoder as is.

SSRF guard: the sidecar dials only the decoder and addresses in --allow /
--allow-file (the picker's endpoints file, re-read when it changes) or
the pods of --pool-name (the same InferencePool the picker watches). A
request naming any other address is answered 403 and logged. Client-sent
kv_transfer_params / ec_transfer_params are dropped.`,
		Example: `  spillway sidecar --port 8000 --decoder http://127.0.0.1:8200 \
    --allow 10.0.0.11:8000,10.0.0.12:8000 --prefill-timeout 30s --retries 2
  spillway sidecar --decoder http://127.0.0.1:8200 --allow-file /etc/spillway/endpoints.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: want 1..65535", port)
			}
			o.Listen = fmt.Sprintf(":%d", port)
			if kf.Enabled() {
				src, err := kubernetes.NewPoolSource(kf.Config())
				if err != nil {
					return fmt.Errorf("allow-list from the pool: %w", err)
				}
				o.AllowSource = src
			}
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return kvtransfer.Run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&port, "port", 8000, "port the sidecar listens on (all interfaces)")
	f.StringVar(&o.Sidecar.Decoder, "decoder", "http://127.0.0.1:8200", "base URL of the local vLLM decoder")
	f.StringSliceVar(&o.Allow, "allow", nil, "prefill/encoder addresses (host:port) the sidecar may dial; comma-separated or repeated")
	f.StringVar(&o.AllowFile, "allow-file", "", "endpoints file (the picker's --endpoints format) whose addresses may be dialed; re-read on change")
	f.DurationVar(&o.Sidecar.PrefillTimeout, "prefill-timeout", 60*time.Second, "bound on the prefill leg, retries included; then the decoder prefills locally")
	f.DurationVar(&o.Sidecar.EncodeTimeout, "encode-timeout", 30*time.Second, "bound on the encoder legs; a late encoder is skipped")
	f.IntVar(&o.Sidecar.Retries, "retries", 2, "prefill leg retries after 502/503/504 or a connection error (0 = none)")
	f.DurationVar(&o.Sidecar.Backoff, "backoff", 50*time.Millisecond, "wait before the first prefill retry, doubled each retry, capped at 1s")
	kf.AddDiscoveryTo(f)
	f.StringVar(&o.MetricsListen, "metrics-listen", "", "address for /metrics (e.g. :9090); empty = off")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if o.Sidecar.Retries == 0 {
			o.Sidecar.Retries = -1 // kvtransfer.Options: negative = no retries
		}
		return nil
	}
	return cmd
}
