package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/calibrate"
)

func init() { subcommands = append(subcommands, newCalibrateCmd) }

func newCalibrateCmd() *cobra.Command {
	var o calibrate.Options
	var matrix, accel, engine string
	var tp int
	var tmax []time.Duration
	var decode bool
	var do calibrate.DecodeOptions
	cmd := &cobra.Command{
		Use:   "calibrate",
		Short: "Measure an endpoint's peakPrefillThroughput and, with --decode, its decode step cost",
		Long: `calibrate measures peakPrefillThroughput against any OpenAI-compatible server:
it sends cache-missing random prompts of exactly --chunk-size tokens (set it to
the engine's max-num-batched-tokens; the length is checked with the server's
/tokenize when it has one, else with the reported usage), one at a time with
max_tokens 1 and streaming, discards the warm-ups and reports

  peakPrefillThroughput = chunk size / median TTFT

with the saturation threshold τ = peakPrefillThroughput × T_max for several TTFT
ceilings T_max (maxTTFTPenaltyMs). Measure through the path requests take
(gateway, sidecar) for the value that matches production. With --write-matrix
the value is merged into a configuration matrix file keyed by model,
accelerator, engine, TP and chunk size (deploy/calibration/matrix.yaml ships
the published values), which prefix-cache-affinity-filter can read instead of a
literal number.

With --decode it also measures the decode step time as a function of batch
size: for each --batch-sizes B it starts B concurrent streams of
--decode-prompt-tokens random prompt tokens and --decode-output-tokens output
tokens, times the SSE chunks while all B streams are decoding, and fits

  step(b) = decodeStepBaseSeconds + decodeStepPerSeqSeconds × b

by least squares; prefillSecondsPerToken = 1 / peakPrefillThroughput. With
--write-matrix the three costs are written into the row next to
peakPrefillThroughput, where marginal-cost-scorer and latency-predictor read
them (calibrationMatrix + fingerprint). Against a simulator started with
--time-scale s pass the same --time-scale (keep s ≤ 2 with --decode: at
higher speeds the client's SSE timing cannot keep up on a loaded machine).`,
		Example: `  spillway calibrate --endpoint http://10.0.0.5:8000 --model Qwen/Qwen3-32B --chunk-size 8192
  spillway calibrate --endpoint http://127.0.0.1:8000 --model Qwen3-32B --chunk-size 8192 \
      --write-matrix deploy/calibration/matrix.yaml --accelerator H100 --engine vLLM --tp 2
  spillway calibrate --endpoint http://127.0.0.1:8000 --model Qwen3-32B --chunk-size 8192 --decode \
      --batch-sizes 1,4,16,32 --write-matrix deploy/calibration/matrix.yaml --accelerator H100 --engine vLLM --tp 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C stops the run between events and closes what it started.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if o.Endpoint == "" || o.Model == "" {
				return errors.New("--endpoint and --model are required")
			}
			if matrix != "" && (accel == "" || engine == "" || tp < 1) {
				return errors.New("--write-matrix needs --accelerator, --engine and --tp to key the row")
			}
			out := cmd.OutOrStdout()
			o.Log = cmd.ErrOrStderr()
			m, err := calibrate.Measure(ctx, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "median TTFT of %d-token prompts: %v (%d samples)\n", m.ChunkSize, m.MedianTTFT.Round(time.Microsecond), len(m.TTFTs))
			fmt.Fprintf(out, "peakPrefillThroughput: %.0f tokens/s\n\n", m.PeakPrefillThroughput)
			fmt.Fprint(out, m.TauTable(tmax))
			var dm *calibrate.DecodeMeasurement
			if decode {
				do.Options = o
				dm, err = calibrate.MeasureDecode(ctx, do)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "\ndecode step fit over batch sizes %v (prompt %d, output %d tokens):\n", do.BatchSizes, dm.PromptTokens, dm.OutputTokens)
				fmt.Fprintf(out, "  prefillSecondsPerToken:  %.4g\n  decodeStepBaseSeconds:   %.4g\n  decodeStepPerSeqSeconds: %.4g\n", 1/m.PeakPrefillThroughput, dm.Base, dm.PerSeq)
			}
			if matrix == "" {
				return nil
			}
			mx, err := calibrate.ReadMatrix(matrix)
			if err != nil {
				return err
			}
			row := calibrate.Entry{Model: o.Model, Accelerator: accel, Engine: engine, TP: tp, ChunkSize: o.ChunkSize, PeakPrefillThroughput: float64(int(m.PeakPrefillThroughput + 0.5))}
			if dm != nil {
				pre, base, per := 1/m.PeakPrefillThroughput, dm.Base, dm.PerSeq
				row.PrefillSecondsPerToken, row.DecodeStepBaseSeconds, row.DecodeStepPerSeqSeconds = &pre, &base, &per
			}
			replaced, err := mx.Merge(row)
			if err != nil {
				return err
			}
			if err := calibrate.WriteMatrix(matrix, mx); err != nil {
				return err
			}
			verb := "added to"
			if replaced {
				verb = "replaced in"
			}
			fmt.Fprintf(out, "\nrow %s/%s/%s tp%d chunk %d %s %s\n", o.Model, accel, engine, tp, o.ChunkSize, verb, matrix)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Endpoint, "endpoint", "", "base URL of the OpenAI-compatible server, e.g. http://127.0.0.1:8000 (required)")
	f.StringVar(&o.Model, "model", "", "model name to send (required)")
	f.IntVar(&o.ChunkSize, "chunk-size", 8192, "prompt length in tokens: the engine's max-num-batched-tokens")
	f.IntVar(&o.Warmups, "warmups", 3, "requests sent first and discarded")
	f.IntVar(&o.Samples, "samples", 10, "measured requests (the median TTFT is used)")
	f.StringVar(&o.API, "api", "completions", "API to call: completions (/v1/completions, no chat template) or chat")
	f.DurationVar(&o.Timeout, "timeout", 120*time.Second, "per-request timeout")
	f.Uint64Var(&o.Seed, "seed", 0, "seed of the random prompts (default: time-based)")
	f.DurationSliceVar(&tmax, "tmax", []time.Duration{10 * time.Second, 14 * time.Second, 18 * time.Second, 25 * time.Second}, "TTFT ceilings (maxTTFTPenaltyMs) to print τ for")
	f.StringVar(&matrix, "write-matrix", "", "merge the result into this matrix file (e.g. deploy/calibration/matrix.yaml)")
	f.StringVar(&accel, "accelerator", "", "matrix key: accelerator (e.g. H100, TPU-v7x)")
	f.StringVar(&engine, "engine", "", "matrix key: serving engine (e.g. vLLM, SGLang)")
	f.IntVar(&tp, "tp", 0, "matrix key: tensor parallelism")
	f.BoolVar(&decode, "decode", false, "also measure the decode step cost as a function of batch size (see above)")
	f.IntSliceVar(&do.BatchSizes, "batch-sizes", []int{1, 4, 16, 32}, "with --decode: concurrent streams per measurement (at least two distinct sizes)")
	f.IntVar(&do.PromptTokens, "decode-prompt-tokens", 1024, "with --decode: prompt tokens per stream (the context the per-sequence cost is measured at)")
	f.IntVar(&do.OutputTokens, "decode-output-tokens", 64, "with --decode: output tokens per stream")
	f.Float64Var(&o.TimeScale, "time-scale", 1, "the server's simulated seconds per wall second: 1 for real engines, a simulator's --time-scale (measured times are multiplied by it)")
	return cmd
}
