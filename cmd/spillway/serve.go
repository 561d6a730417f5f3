package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/discovery/kubernetes"
	"github.com/spillway-llm/spillway/extproc"
)

func init() { subcommands = append(subcommands, newServeCmd) }

// pickerFlags are shared by serve and gateway.
type pickerFlags struct {
	config          string
	endpoints       string
	metricsPort     int
	refreshInterval time.Duration
	scrapeTimeout   time.Duration
	bindAddress     string
	k8s             kubernetes.Flags
}

func (f *pickerFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "EndpointPickerConfig file (llm-d format); when omitted a built-in config with one decode profile (decode-filter, queue-scorer, kv-cache-utilization-scorer, max-score-picker with 2 fallbacks) is used")
	fl.StringVar(&f.endpoints, "endpoints", "", "static endpoints file (YAML: endpoints: [{name, address, labels}]); re-read when it changes")
	fl.IntVar(&f.metricsPort, "metrics-port", 9090, "port for /metrics, /healthz and /readyz (0 disables)")
	fl.DurationVar(&f.refreshInterval, "refresh-metrics-interval", 50*time.Millisecond, "how often each endpoint's /metrics is scraped")
	fl.StringVar(&f.bindAddress, "bind-address", "", "IP address the picker's ports listen on (empty: all interfaces)")
	f.k8s.AddTo(fl)
	fl.DurationVar(&f.scrapeTimeout, "scrape-timeout", 0, "timeout of one engine-metrics scrape (0: the staleness bound, max(10×interval, 500ms))")
}

func (f *pickerFlags) hostPort(port int) string {
	return net.JoinHostPort(f.bindAddress, strconv.Itoa(port))
}

// endpointSource builds the discovery source from the flags. It is the
// seam where further sources (Kubernetes InferencePool) plug in.
func endpointSource(f *pickerFlags) (discovery.Source, error) {
	if f.k8s.Enabled() {
		if f.endpoints != "" {
			return nil, errors.New("--endpoints and --pool-name/--endpoint-selector are exclusive: pick one endpoint source")
		}
		return kubernetes.NewPoolSource(f.k8s.Config())
	}
	if f.endpoints == "" {
		return nil, errors.New("no endpoint source: give --endpoints FILE, or --pool-name NAME (Kubernetes InferencePool), or --endpoint-selector with --endpoint-target-ports")
	}
	if _, err := discovery.LoadEndpointsFile(f.endpoints); err != nil {
		return nil, err
	}
	return discovery.NewFileSource(f.endpoints), nil
}

// runPicker builds the stack, runs discovery, scraping and the admin server,
// and calls serve with the stack until a signal arrives or something fails.
func runPicker(cmd *cobra.Command, f *pickerFlags, serve func(ctx context.Context, st *director.Stack) error) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	src, err := endpointSource(f)
	if err != nil {
		return err
	}
	st, err := director.NewStack(ctx, director.StackOptions{
		ConfigPath: f.config, Source: src,
		ScrapeInterval: f.refreshInterval, ScrapeTimeout: f.scrapeTimeout, Logger: log,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return st.Run(gctx) })
	if f.metricsPort != 0 {
		ln, err := net.Listen("tcp", f.hostPort(f.metricsPort))
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		log.Info("metrics listening", "addr", ln.Addr().String())
		g.Go(func() error { return director.ServeHTTP(gctx, ln, st.AdminHandler(), 2*time.Second) })
	}
	g.Go(func() error { return serve(gctx, st) })
	return g.Wait()
}

func newServeCmd() *cobra.Command {
	var f pickerFlags
	var grpcPort, healthPort int
	var certPath, keyPath string
	cmd := &cobra.Command{
		Use:   "serve (--endpoints FILE | --pool-name NAME [--pool-namespace NS]) [--config FILE]",
		Short: "Run the endpoint picker as an Envoy ext_proc server",
		Long: `serve runs the endpoint picker behind Envoy (or any Gateway API Inference
Extension gateway) over the ext_proc protocol. Envoy sends each request's
headers and body (FULL_DUPLEX_STREAMED); spillway schedules it and answers with
x-gateway-destination-endpoint (primary,fallback...) and the same value in the
envoy.lb dynamic metadata, plus x-prefiller-host-port / x-encoder-hosts-ports
for disaggregated serving. It observes the response (first chunk, usage, end
of stream) to release what the request booked.

gRPC health services liveness, readiness (endpoints synced) and
envoy.service.ext_proc.v3.ExternalProcessor are served on --grpc-health-port
(and on --grpc-port). Prometheus metrics are on --metrics-port /metrics.
Send a request with "x-spillway-debug: 1" to get the decision trace in the
x-spillway-decision response header.`,
		Example: `  spillway serve --endpoints endpoints.yaml
  spillway serve --config pd.yaml --endpoints endpoints.yaml --grpc-port 9002 --cert-path tls.crt --key-path tls.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (certPath == "") != (keyPath == "") {
				return errors.New("--cert-path and --key-path go together")
			}
			return runPicker(cmd, &f, func(ctx context.Context, st *director.Stack) error {
				ln, err := net.Listen("tcp", f.hostPort(grpcPort))
				if err != nil {
					return fmt.Errorf("ext_proc listener: %w", err)
				}
				var hln net.Listener
				if healthPort != 0 && healthPort != grpcPort {
					if hln, err = net.Listen("tcp", f.hostPort(healthPort)); err != nil {
						ln.Close()
						return fmt.Errorf("health listener: %w", err)
					}
				}
				slog.Info("ext_proc listening", "addr", ln.Addr().String(), "tls", certPath != "")
				return extproc.Serve(ctx, extproc.NewServer(st.Director, slog.Default()), extproc.ServeOptions{
					Listener: ln, HealthListener: hln, CertPath: certPath, KeyPath: keyPath, Ready: st.Store.Synced,
				})
			})
		},
	}
	f.add(cmd)
	fl := cmd.Flags()
	fl.IntVar(&grpcPort, "grpc-port", 9002, "ext_proc gRPC port")
	fl.IntVar(&healthPort, "grpc-health-port", 9003, "gRPC health port (0 disables the separate health listener)")
	fl.StringVar(&certPath, "cert-path", "", "TLS certificate (PEM) for the ext_proc port; with --key-path enables TLS")
	fl.StringVar(&keyPath, "key-path", "", "TLS private key (PEM) for the ext_proc port")
	return cmd
}
