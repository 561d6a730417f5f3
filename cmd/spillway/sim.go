package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/test/sim"
)

func init() { subcommands = append(subcommands, newSimCmd) }

type simFlags struct {
	profile, model      string
	timeScale           float64
	numGPUBlocks        int
	maxBatched, maxSeqs int
	faults              sim.Faults
}

func (f *simFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.profile, "profile", sim.DefaultProfileName, "hardware profile (see 'spillway sim profiles')")
	fl.StringVar(&f.model, "model", "sim-model", "served model name")
	fl.Float64Var(&f.timeScale, "time-scale", 1, "simulated seconds per wall second (10 = ten times faster); reported TTFTs are simulated")
	fl.IntVar(&f.numGPUBlocks, "num-gpu-blocks", 0, "override the profile's KV capacity in blocks")
	fl.IntVar(&f.maxBatched, "max-num-batched-tokens", 0, "override the profile's per-step token budget")
	fl.IntVar(&f.maxSeqs, "max-num-seqs", 0, "override the profile's running-request bound")
	fl.Float64Var(&f.faults.FailRate, "fail-rate", 0, "fraction of inference requests to fail")
	fl.IntVar(&f.faults.FailStatus, "fail-status", 503, "HTTP status of injected failures")
	fl.DurationVar(&f.faults.Stall, "stall", 0, "stall inference requests this long (wall time) before serving")
	fl.Float64Var(&f.faults.StallRate, "stall-rate", 0, "fraction of requests to stall (0 with --stall = all)")
	fl.IntVar(&f.faults.DieAfter, "die-after", 0, "exit after serving this many inference requests (0 = never)")
}

func (f *simFlags) prof() (sim.Profile, error) {
	p, err := sim.LookupProfile(f.profile)
	if err != nil {
		return p, err
	}
	if f.numGPUBlocks > 0 {
		p.NumGPUBlocks = f.numGPUBlocks
	}
	if f.maxBatched > 0 {
		p.MaxNumBatchedTokens = f.maxBatched
	}
	if f.maxSeqs > 0 {
		p.MaxNumSeqs = f.maxSeqs
	}
	return p, nil
}

func waitSignal(ctx context.Context) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
}

func newSimCmd() *cobra.Command {
	var f simFlags
	var host, advertise, role, engineID, kvEndpoint, kvReplay string
	var port int
	var kvDial bool
	c := &cobra.Command{
		Use:   "sim",
		Short: "Run a simulated vLLM endpoint (real HTTP, simulated GPU)",
		Long: `sim serves one simulated vLLM endpoint: OpenAI-compatible /v1/chat/completions,
/v1/completions and /v1/responses, /tokenize, /v1/models, /health and /metrics (vLLM
names), with the prefill/decode/encode roles of disaggregated serving and optional
KV events over ZMQ. See docs/sim.md.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.prof()
			if err != nil {
				return err
			}
			r, err := sim.ParseRole(role)
			if err != nil {
				return err
			}
			cfg := sim.ServerConfig{Name: engineID, Model: f.model, Role: r, Profile: p, TimeScale: f.timeScale, Faults: f.faults,
				Listen: net.JoinHostPort(host, strconv.Itoa(port)), AdvertiseHost: advertise, Logger: slog.Default(), OnDie: func() { os.Exit(3) }}
			if kvEndpoint != "" {
				cfg.KVEvents = &sim.KVEventsConfig{Endpoint: kvEndpoint, Dial: kvDial, ReplayEndpoint: kvReplay}
			}
			s, err := sim.NewServer(cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "sim %s role=%s profile=%s model=%s listening on %s (time scale %g)\n",
				s.Name(), r, p.Name, f.model, s.Addr(), f.timeScale)
			waitSignal(cmd.Context())
			return nil
		},
	}
	f.register(c)
	c.Flags().StringVar(&host, "host", "0.0.0.0", "listen host")
	c.Flags().IntVar(&port, "port", 8200, "listen port")
	c.Flags().StringVar(&advertise, "advertise-host", os.Getenv("POD_IP"), "host to put in kv_transfer_params/ec_transfer_params and the KV-events topic (default $POD_IP, else the listen host)")
	c.Flags().StringVar(&role, "role", "both", "both | prefill | decode | encode")
	c.Flags().StringVar(&engineID, "engine-id", "", "engine id reported in kv_transfer_params (default <role>-<port>)")
	c.Flags().StringVar(&kvEndpoint, "kv-events-endpoint", "", `publish KV events on this ZMQ endpoint, e.g. "tcp://*:5557"`)
	c.Flags().BoolVar(&kvDial, "kv-events-dial", false, "dial the KV events endpoint instead of binding it")
	c.Flags().StringVar(&kvReplay, "kv-replay-endpoint", "", `bind the KV events replay ROUTER here, e.g. "tcp://*:5558"`)
	c.AddCommand(newSimFleetCmd(), newSimProfilesCmd())
	return c
}

func newSimFleetCmd() *cobra.Command {
	var f simFlags
	var fc sim.FleetConfig
	var out string
	c := &cobra.Command{
		Use:   "fleet",
		Short: "Run a fleet of simulated endpoints on consecutive ports and print the endpoints YAML",
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.prof()
			if err != nil {
				return err
			}
			fc.Profile, fc.Model, fc.TimeScale, fc.Faults = p, f.model, f.timeScale, f.faults
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			fl, err := sim.StartFleet(ctx, fc)
			if err != nil {
				return err
			}
			defer fl.Close()
			y := fl.EndpointsYAML()
			if out != "" {
				if err := os.WriteFile(out, []byte(y), 0o644); err != nil {
					return err
				}
			}
			fmt.Fprint(cmd.OutOrStdout(), y)
			waitSignal(ctx)
			return nil
		},
	}
	f.register(c)
	c.Flags().IntVar(&fc.Encode, "encode", 0, "encode endpoints")
	c.Flags().IntVar(&fc.Prefill, "prefill", 0, "prefill endpoints")
	c.Flags().IntVar(&fc.Decode, "decode", 0, "decode endpoints")
	c.Flags().IntVar(&fc.Both, "both", 0, "endpoints serving both prefill and decode")
	c.Flags().IntVar(&fc.BasePort, "base-port", 8100, "first port (0 = random free ports)")
	c.Flags().StringVar(&fc.Host, "host", "127.0.0.1", "listen host")
	c.Flags().BoolVar(&fc.KVEvents, "kv-events", false, "publish KV events (PUB on base-port+1000+i, replay on base-port+2000+i)")
	c.Flags().StringVar(&out, "endpoints-file", "", "also write the endpoints YAML here")
	return c
}

func newSimProfilesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "profiles",
		Short: "List the simulator's hardware profiles",
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			for _, n := range sim.ProfileNames() {
				p := sim.MustProfile(n)
				fmt.Fprintf(w, "%-18s B=%d T(B)=%v (%.0f prefill tok/s) base=%v blocks=%d (%d tokens) max-seqs=%d TPOT(32×4k)=%v kv=%dB/tok\n",
					n, p.MaxNumBatchedTokens, p.ChunkTime, float64(p.MaxNumBatchedTokens)/p.ChunkTime.Seconds(), p.StepBase,
					p.NumGPUBlocks, p.NumGPUBlocks*p.BlockSize, p.MaxNumSeqs, p.StepTime(nil, 32, 32*4096).Round(time.Microsecond), p.KVBytesPerToken)
			}
			return nil
		},
	}
}
