// Package scrape polls each endpoint's engine metrics (vLLM or SGLang
// /metrics) and publishes them on the endpoint view, marking them stale when
// a scrape fails or no fresh sample arrived in time.
package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

// Defaults.
const (
	DefaultInterval = 50 * time.Millisecond
	// maxBody bounds what one scrape reads: a vLLM exposition is ~10-50 KB;
	// anything far larger is not an engine's /metrics.
	maxBody = 8 << 20
)

// Options configure a Scraper. Zero values take defaults.
type Options struct {
	// Interval between scrapes of one endpoint (DefaultInterval).
	Interval time.Duration
	// Timeout of one scrape (StaleAfter).
	Timeout time.Duration
	// StaleAfter marks an endpoint's metrics stale when no scrape has
	// succeeded for this long, or a sample's own timestamp is older
	// (max(10×Interval, 500ms)).
	StaleAfter time.Duration
	// Registerer receives the scrape metrics (a private registry when nil).
	Registerer prometheus.Registerer
	// Client performs the scrapes; its Transport is shared, its Timeout is
	// replaced by Timeout. A keep-alive client sized for many hosts when nil.
	Client *http.Client
	// Logger receives scrape failures, once per transition from healthy to
	// failing (slog.Default() when nil).
	Logger *slog.Logger
}

// Scraper keeps every endpoint of a store scraped.
type Scraper struct {
	store  *discovery.Store
	opts   Options
	client *http.Client
	log    *slog.Logger
	m      *metrics
}

// New returns a scraper for the endpoints of store.
func New(store *discovery.Store, opts Options) *Scraper {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.StaleAfter <= 0 {
		opts.StaleAfter = max(10*opts.Interval, 500*time.Millisecond)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.StaleAfter
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	var c http.Client
	if opts.Client != nil {
		c = *opts.Client
	} else {
		c.Transport = &http.Transport{
			Proxy:               nil, // engines are reached directly, never through a proxy
			DialContext:         (&net.Dialer{Timeout: opts.Timeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0, // no global cap: one idle connection per endpoint
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     90 * time.Second,
			// Loopback and in-cluster links are fast; gzip would cost more
			// CPU than it saves.
			DisableCompression: true,
		}
	}
	c.Timeout = opts.Timeout
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Scraper{store: store, opts: opts, client: &c, log: log, m: newMetrics(opts.Registerer)}
}

// Options returns the options after defaults.
func (s *Scraper) Options() Options { return s.opts }

// Run scrapes until ctx is done, following the store's endpoint set: new
// endpoints get a scrape loop, removed ones have theirs stopped. It returns
// nil once every loop has exited.
func (s *Scraper) Run(ctx context.Context) error {
	targets := map[*profiles.Endpoint]*target{}
	var wg sync.WaitGroup
	defer func() {
		for _, t := range targets {
			t.cancel()
		}
		wg.Wait()
		s.client.CloseIdleConnections()
	}()
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	seen := map[*profiles.Endpoint]bool{}
	for {
		now := time.Now()
		eps := s.store.Endpoints()
		clear(seen)
		for _, ep := range eps {
			seen[ep] = true
		}
		// Removals first: an endpoint replaced under the same name (new
		// address or labels) must not have its new series deleted.
		for ep, t := range targets {
			if !seen[ep] {
				t.cancel()
				delete(targets, ep)
				s.m.forget(ep.Name)
				continue
			}
			t.checkStale(now)
		}
		for _, ep := range eps {
			if _, ok := targets[ep]; !ok {
				t := s.newTarget(ctx, ep)
				targets[ep] = t
				wg.Add(1)
				go func() { defer wg.Done(); s.loop(t) }()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// target is one endpoint's scrape state. Buffers and the parser are reused
// across scrapes; only its own goroutine touches them.
type target struct {
	s      *Scraper
	ep     *profiles.Endpoint
	ctx    context.Context
	cancel context.CancelFunc
	url    string
	req    *http.Request
	buf    bytes.Buffer
	kept   []byte // the lines of buf that the mapping reads
	rd     bytes.Reader
	parser expfmt.TextParser
	fams   families

	errs  prometheus.Counter
	stale prometheus.Gauge

	mu      sync.Mutex // orders publication between the loop and checkStale
	lastOK  atomic.Int64
	failing bool // last scrape failed (for log transitions)
}

func (s *Scraper) newTarget(parent context.Context, ep *profiles.Endpoint) *target {
	ctx, cancel := context.WithCancel(parent)
	t := &target{
		s: s, ep: ep, ctx: ctx, cancel: cancel,
		url:    "http://" + ep.Address + "/metrics",
		parser: expfmt.NewTextParser(model.UTF8Validation),
		fams:   families{},
		errs:   s.m.errors.WithLabelValues(ep.Name),
		stale:  s.m.stale.WithLabelValues(ep.Name),
	}
	t.lastOK.Store(time.Now().UnixNano()) // grace period before the first scrape counts as missing
	t.stale.Set(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
	if err == nil {
		// Ask for the classic text format: its parser is the cheap one.
		req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1")
		t.req = req
	}
	return t
}

func (s *Scraper) loop(t *target) {
	// Spread the endpoints over the interval so a large pool does not scrape
	// in one burst.
	first := time.NewTimer(rand.N(s.opts.Interval))
	defer first.Stop()
	select {
	case <-t.ctx.Done():
		return
	case <-first.C:
	}
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	for {
		start := time.Now()
		m, err := t.scrape(start)
		s.m.duration.Observe(time.Since(start).Seconds())
		if t.ctx.Err() != nil {
			return // removed or shutting down: the result no longer matters
		}
		t.publish(m, err)
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scrape fetches and parses the endpoint's /metrics once.
func (t *target) scrape(now time.Time) (*profiles.Metrics, error) {
	if t.req == nil {
		return nil, fmt.Errorf("bad scrape URL %q", t.url)
	}
	resp, err := t.s.client.Do(t.req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	t.buf.Reset()
	_, err = t.buf.ReadFrom(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if t.buf.Len() > maxBody {
		return nil, fmt.Errorf("exposition larger than %d bytes", maxBody)
	}
	fams, err := t.parse(expfmt.ResponseFormat(resp.Header))
	if err != nil {
		return nil, fmt.Errorf("parsing exposition: %w", err)
	}
	var staleBefore time.Time
	if t.s.opts.StaleAfter > 0 {
		staleBefore = now.Add(-t.s.opts.StaleAfter)
	}
	return toMetrics(fams, time.Now(), staleBefore)
}

func (t *target) parse(format expfmt.Format) (families, error) {
	typ := format.FormatType()
	if typ == expfmt.TypeProtoDelim {
		t.rd.Reset(t.buf.Bytes())
	} else {
		t.kept = filterLines(t.kept[:0], t.buf.Bytes())
		t.rd.Reset(t.kept)
	}
	switch typ {
	case expfmt.TypeOpenMetrics, expfmt.TypeProtoDelim:
		clear(t.fams)
		dec := expfmt.NewDecoder(&t.rd, format)
		for {
			mf := &dto.MetricFamily{}
			err := dec.Decode(mf)
			if errors.Is(err, io.EOF) {
				return t.fams, nil
			}
			if err != nil {
				return nil, err
			}
			t.fams[mf.GetName()] = mf
		}
	default:
		fams, err := t.parser.TextToMetricFamilies(&t.rd)
		return families(fams), err
	}
}

// publish makes a scrape's outcome visible on the endpoint.
func (t *target) publish(m *profiles.Metrics, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		t.lastOK.Store(m.UpdatedAt.UnixNano())
		t.ep.SetMetrics(m)
		t.stale.Set(0)
		if t.failing {
			t.failing = false
			t.s.log.Info("endpoint metrics scrape recovered", "endpoint", t.ep.Name)
		}
		return
	}
	t.errs.Inc()
	if !t.failing {
		t.failing = true
		t.s.log.Warn("endpoint metrics scrape failed; metrics marked stale", "endpoint", t.ep.Name, "url", t.url, "err", err)
	}
	t.markStale("scrape " + t.url + ": " + err.Error())
}

// checkStale marks the endpoint stale when no scrape succeeded within
// StaleAfter, e.g. while a scrape hangs until its timeout.
func (t *target) checkStale(now time.Time) {
	last := t.lastOK.Load()
	if now.UnixNano()-last <= int64(t.s.opts.StaleAfter) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lastOK.Load() != last || t.ep.Metrics().Stale {
		return
	}
	t.markStale(fmt.Sprintf("no successful scrape for %s (stale after %s)", now.Sub(time.Unix(0, last)).Round(time.Millisecond), t.s.opts.StaleAfter))
}

// markStale republishes the last numbers flagged stale: consumers see both
// that they are old (UpdatedAt, Stale) and why (Err). Callers hold t.mu.
func (t *target) markStale(why string) {
	cur := t.ep.Metrics()
	if cur.Stale && cur.Err == why {
		t.stale.Set(1)
		return
	}
	next := *cur
	next.Stale = true
	next.Err = why
	t.ep.SetMetrics(&next)
	t.stale.Set(1)
}
