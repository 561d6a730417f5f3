package director

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/scrape"
)

// StackOptions configure the parts both front doors run: endpoint discovery,
// metrics scraping, the scheduler and the director.
type StackOptions struct {
	// ConfigPath is the EndpointPickerConfig file; DefaultConfig when empty.
	ConfigPath string
	// Source discovers endpoints (required).
	Source discovery.Source
	// ScrapeInterval and ScrapeTimeout configure engine-metrics scraping
	// (scrape package defaults when zero).
	ScrapeInterval, ScrapeTimeout time.Duration
	// Rewriter optionally rewrites request bodies after scheduling.
	Rewriter BodyRewriter
	Logger   *slog.Logger
}

// Stack is a ready-to-run picker: store, scraper, scheduler, director and
// the metrics registry they share.
type Stack struct {
	Registry  *prometheus.Registry
	Store     *discovery.Store
	Scheduler *profiles.Scheduler
	Director  *Director
	Scraper   *scrape.Scraper
	source    discovery.Source
	log       *slog.Logger
}

// registrar is implemented by sources that export metrics (FileSource).
type registrar interface {
	Register(reg prometheus.Registerer)
}

// NewStack builds the stack; ctx bounds the plugins' background work.
func NewStack(ctx context.Context, o StackOptions) (*Stack, error) {
	if o.Source == nil {
		return nil, errors.New("no endpoint source configured")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store := discovery.NewStore()
	sched, err := LoadScheduler(o.ConfigPath, profiles.Options{Endpoints: store, Registerer: reg, Context: ctx})
	if err != nil {
		return nil, err
	}
	store.Subscribe(sched)
	if r, ok := o.Source.(registrar); ok {
		r.Register(reg)
	}
	return &Stack{
		Registry:  reg,
		Store:     store,
		Scheduler: sched,
		Director:  New(sched, Options{Registerer: reg, Rewriter: o.Rewriter}),
		Scraper:   scrape.New(store, scrape.Options{Interval: o.ScrapeInterval, Timeout: o.ScrapeTimeout, Registerer: reg, Logger: o.Logger}),
		source:    o.Source,
		log:       o.Logger,
	}, nil
}

// Run runs discovery and scraping until ctx is done or the source fails.
func (s *Stack) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srcErr := make(chan error, 1)
	scrDone := make(chan struct{})
	go func() { srcErr <- s.source.Run(ctx, s.Store) }()
	go func() { defer close(scrDone); _ = s.Scraper.Run(ctx) }()
	var err error
	select {
	case err = <-srcErr:
		if err != nil {
			err = fmt.Errorf("endpoint discovery: %w", err)
		}
	case <-ctx.Done():
		err = <-srcErr
	}
	cancel()
	<-scrDone
	return err
}

// Close stops the scheduler's plugins.
func (s *Stack) Close() { s.Scheduler.Close() }

// AdminHandler serves /metrics, /healthz (alive) and /readyz (endpoints synced).
func (s *Stack) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{Registry: s.Registry}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Store.Synced() {
			http.Error(w, "endpoints not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// ServeHTTP serves h on ln until ctx is done, then shuts down gracefully
// (in-flight requests get grace, then are cut).
func ServeHTTP(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
