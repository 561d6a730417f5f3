package extproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health service names (protocols.md §1).
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// ServeOptions configure the listeners.
type ServeOptions struct {
	// Listener serves ext_proc (and health); HealthListener serves health
	// only. Either may be nil to skip it.
	Listener, HealthListener net.Listener
	// CertPath and KeyPath enable TLS on the ext_proc listener (both or neither).
	CertPath, KeyPath string
	// Ready reports whether endpoints are synced; readiness and the
	// ext_proc service report NOT_SERVING until it is true.
	Ready func() bool
	// ReadyPoll is how often Ready is polled (default 200ms).
	ReadyPoll time.Duration
}

// Serve runs the ext_proc and health gRPC servers until ctx is done, then
// stops them gracefully (in-flight streams get a few seconds).
func Serve(ctx context.Context, srv *Server, o ServeOptions) error {
	if o.Listener == nil && o.HealthListener == nil {
		return errors.New("extproc: no listener")
	}
	if (o.CertPath == "") != (o.KeyPath == "") {
		return fmt.Errorf("extproc: TLS needs both --cert-path and --key-path (got cert %q, key %q)", o.CertPath, o.KeyPath)
	}
	if o.Ready == nil {
		o.Ready = func() bool { return true }
	}
	if o.ReadyPoll <= 0 {
		o.ReadyPoll = 200 * time.Millisecond
	}
	hs := health.NewServer()
	hs.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	setReady := func(ok bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if ok {
			st = healthpb.HealthCheckResponse_SERVING
		}
		hs.SetServingStatus(HealthReadiness, st)
		hs.SetServingStatus(HealthExtProc, st)
		hs.SetServingStatus("", st)
	}
	setReady(o.Ready())

	var servers []*grpc.Server
	errc := make(chan error, 2)
	if o.Listener != nil {
		// Request bodies of long prompts are hundreds of KiB: a window
		// larger than HTTP/2's 64 KiB default lets Envoy send one without
		// waiting for window updates (Envoy's own windows are 256 MiB).
		opts := []grpc.ServerOption{grpc.InitialWindowSize(4 << 20), grpc.InitialConnWindowSize(16 << 20)}
		if o.CertPath != "" {
			creds, err := credentials.NewServerTLSFromFile(o.CertPath, o.KeyPath)
			if err != nil {
				return fmt.Errorf("extproc: loading TLS certificate: %w", err)
			}
			opts = append(opts, grpc.Creds(creds))
		}
		gs := grpc.NewServer(opts...)
		extprocv3.RegisterExternalProcessorServer(gs, srv)
		healthpb.RegisterHealthServer(gs, hs)
		servers = append(servers, gs)
		go func() { errc <- serveErr("ext_proc", gs.Serve(o.Listener)) }()
	}
	if o.HealthListener != nil {
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		servers = append(servers, gs)
		go func() { errc <- serveErr("health", gs.Serve(o.HealthListener)) }()
	}

	t := time.NewTicker(o.ReadyPoll)
	defer t.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-errc:
			break loop
		case <-t.C:
			setReady(o.Ready())
		}
	}
	hs.Shutdown()
	for _, gs := range servers {
		stopGracefully(gs, 5*time.Second)
	}
	return err
}

func serveErr(what string, err error) error {
	if err == nil || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return fmt.Errorf("extproc: %s server: %w", what, err)
}

func stopGracefully(gs *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		gs.Stop()
		<-done
	}
}
