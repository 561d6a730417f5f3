// Package director is the request-handling core shared by spillway's two
// front doors (the Envoy ext_proc server and the built-in HTTP gateway): it
// turns a request's headers and body into a profiles.Request, schedules and
// dispatches it, names the routing headers to set, and observes the response
// to drive the request's lifecycle hooks exactly once.
package director

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spillway-llm/spillway/profiles"
)

// BodyRewriter may replace the body sent upstream after scheduling (e.g. to
// add kv_transfer_params). It returns the new body and true, or false to
// keep the client's body.
type BodyRewriter interface {
	Rewrite(req *profiles.Request, res *profiles.Result) ([]byte, bool, error)
}

// Options configure a Director.
type Options struct {
	// Registerer receives the request metrics; a private registry when nil.
	Registerer prometheus.Registerer
	// Rewriter optionally rewrites bodies after scheduling.
	Rewriter BodyRewriter
	// MaxBodyBytes bounds a buffered request body (413 above it); 0 = 64 MiB.
	MaxBodyBytes int
}

// DefaultMaxBodyBytes bounds request bodies when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 64 << 20

// Director schedules requests with one Scheduler.
type Director struct {
	sched *profiles.Scheduler
	opts  Options
	m     *Metrics
}

// New returns a director over s.
func New(s *profiles.Scheduler, opts Options) *Director {
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &Director{sched: s, opts: opts, m: NewMetrics(opts.Registerer)}
}

// Scheduler returns the director's scheduler.
func (d *Director) Scheduler() *profiles.Scheduler { return d.sched }

// MaxBodyBytes is the largest request body the front doors buffer.
func (d *Director) MaxBodyBytes() int { return d.opts.MaxBodyBytes }

// Inbound is a complete client request as a front door received it.
type Inbound struct {
	Method string
	Path   string // may include the query
	// Headers have lower-case names (one value each; repeated headers
	// joined by ","). Route removes the routing headers from it.
	Headers map[string]string
	Body    []byte
	// SubsetHint restricts the candidates when non-nil (an empty, non-nil
	// slice means "nothing eligible": 503).
	SubsetHint []string
}

// Route parses, schedules and dispatches a request. On error the returned
// error carries the HTTP status (profiles.HTTPStatus) and the request is
// already counted in the metrics; the caller only answers the client.
func (d *Director) Route(ctx context.Context, in Inbound) (*Exchange, error) {
	start := time.Now()
	x, err := d.route(ctx, in, start)
	if err != nil {
		d.m.observe(profiles.HTTPStatus(err))
		return nil, err
	}
	d.m.inflight.Inc()
	return x, nil
}

func (d *Director) route(ctx context.Context, in Inbound, start time.Time) (*Exchange, error) {
	if in.Headers == nil {
		in.Headers = map[string]string{}
	}
	for _, h := range RoutingHeaders {
		delete(in.Headers, h)
	}
	if len(in.Body) > d.opts.MaxBodyBytes {
		return nil, &profiles.StatusError{Code: http.StatusRequestEntityTooLarge,
			Message: fmt.Sprintf("request body of %d bytes exceeds the limit of %d bytes", len(in.Body), d.opts.MaxBodyBytes)}
	}
	req, err := profiles.ParseRequest(in.Path, in.Headers, in.Body)
	if err != nil {
		return nil, err
	}
	req.SubsetHint = in.SubsetHint
	if v := in.Headers[HeaderDebug]; v == "1" || strings.EqualFold(v, "true") {
		req.SetDebug(true)
	}
	res, err := d.sched.Schedule(ctx, req)
	if err != nil {
		return nil, err
	}
	body, rewritten := in.Body, false
	if d.opts.Rewriter != nil {
		nb, ok, err := d.opts.Rewriter.Rewrite(req, res)
		if err != nil {
			return nil, fmt.Errorf("rewriting the request body: %w", err)
		}
		if ok {
			body, rewritten = nb, true
		}
	}
	x := &Exchange{
		d: d, Req: req, Result: res, start: start,
		body: body, rewritten: rewritten,
		dest: res.DestinationValue(),
	}
	x.tracker = d.sched.Dispatch(req, res)
	return x, nil
}

// ObserveRejected counts a request a front door answered itself before
// Route (e.g. a body over the limit while still streaming).
func (d *Director) ObserveRejected(code int) { d.m.observe(code) }
