package kvtransfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spillway-llm/spillway/discovery"
)

// RunOptions configure Run.
type RunOptions struct {
	Listen        string   // e.g. ":8000"
	MetricsListen string   // "" = no metrics listener
	Allow         []string // static allow-list entries, host:port
	AllowFile     string   // an endpoints file (the picker's format), re-read on change
	// AllowSource, when set, feeds the allow-list from the same endpoint
	// source the picker uses (e.g. the Kubernetes InferencePool).
	AllowSource discovery.Source
	Sidecar     Options // Decoder, timeouts, retries; Allow and Registerer are filled in
	Logger      *slog.Logger
	// OnListen, when set, is told the sidecar's bound address (tests listen
	// on port 0).
	OnListen func(net.Addr)
}

// Run serves the sidecar until ctx is done, then drains for up to 10 s.
func Run(ctx context.Context, o RunOptions) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	al, err := NewAllowlist(o.Allow...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 3)
	if o.AllowFile != "" {
		specs, err := discovery.LoadEndpointsFile(o.AllowFile)
		if err != nil {
			return fmt.Errorf("--allow-file: %w", err)
		}
		al.Update(specs)
		src := discovery.NewFileSource(o.AllowFile)
		src.Logger = log
		go func() {
			if err := src.Run(ctx, al); err != nil {
				errc <- fmt.Errorf("--allow-file: %w", err)
			}
		}()
	}
	if o.AllowSource != nil {
		go func() {
			if err := o.AllowSource.Run(ctx, al); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("allow-list source: %w", err)
			}
		}()
	}
	if al.Len() == 0 && o.AllowSource == nil {
		log.Warn("sidecar: the allow-list is empty; every request naming a prefiller or encoder will be refused (set --allow or --allow-file)")
	}
	reg := prometheus.NewRegistry()
	o.Sidecar.Allow, o.Sidecar.Registerer, o.Sidecar.Logger = al, reg, log
	sc, err := New(o.Sidecar)
	if err != nil {
		return err
	}
	defer sc.Close()
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("sidecar listener: %w", err)
	}
	log.Info("sidecar listening", "addr", ln.Addr().String(), "decoder", o.Sidecar.Decoder, "allowed", al.Len())
	if o.OnListen != nil {
		o.OnListen(ln.Addr())
	}
	servers := []*http.Server{{Handler: sc, ReadHeaderTimeout: 10 * time.Second}}
	go func() { errc <- servers[0].Serve(ln) }()
	if o.MetricsListen != "" {
		mln, err := net.Listen("tcp", o.MetricsListen)
		if err != nil {
			_ = servers[0].Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, ms)
		go func() { errc <- ms.Serve(mln) }()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = err
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			_ = s.Close()
		}
	}
	return runErr
}
