package decode

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spillway-llm/spillway/profiles"
)

// ActiveRequestScorerType is the plugin type (llm-d name).
const ActiveRequestScorerType = "active-request-scorer"

func init() { profiles.Register(ActiveRequestScorerType, newActiveRequestScorer) }

type activeParams struct {
	// IdleThreshold: an endpoint with at most this many in-flight requests
	// is idle and scores 1.
	IdleThreshold int `json:"idleThreshold"`
	// MaxBusyScore scales the score of busy endpoints: (max − n)/max ×
	// maxBusyScore, max being the busiest candidate's count.
	MaxBusyScore float64 `json:"maxBusyScore"`
}

// ActiveRequestScorer scores endpoints by the picker's own in-flight request
// counts. Counts are kept through the lifecycle hooks: a request is booked
// at dispatch on the endpoint that each profile this scorer runs in picked,
// and released when it finishes or fails. Scraped engine metrics are not
// used: they lag by a scrape interval, the router's own bookings do not.
type ActiveRequestScorer struct {
	profiles.Named
	p   activeParams
	key string
	c   *profiles.EndpointCounter

	profs profiles.ProfileSet // profiles this scorer has scored in
}

func newActiveRequestScorer(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := activeParams{IdleThreshold: 0, MaxBusyScore: 1.0}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.IdleThreshold < 0 {
		return nil, fmt.Errorf("idleThreshold must be ≥ 0, got %d", p.IdleThreshold)
	}
	if p.MaxBusyScore < 0 || p.MaxBusyScore > 1 {
		return nil, fmt.Errorf("maxBusyScore must be in [0,1], got %g", p.MaxBusyScore)
	}
	s := &ActiveRequestScorer{Named: profiles.NewNamed(ActiveRequestScorerType, name), p: p, c: profiles.NewEndpointCounter()}
	s.key = "decode.active-request/" + s.TypedName().Name
	return s, nil
}

// Params implements profiles.Parameterized.
func (s *ActiveRequestScorer) Params() any { return s.p }

// InFlight returns the requests the picker has in flight on ep.
func (s *ActiveRequestScorer) InFlight(ep *profiles.Endpoint) int { return int(s.c.Count(ep)) }

// Score implements profiles.Scorer.
func (s *ActiveRequestScorer) Score(_ context.Context, cs *profiles.CycleState, _ *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	if cs != nil {
		s.profs.Note(cs.Profile)
	}
	var maxN int64
	for _, e := range eps {
		maxN = max(maxN, s.c.Count(e))
	}
	for i, e := range eps {
		n := s.c.Count(e)
		if n <= int64(s.p.IdleThreshold) || maxN == 0 {
			out[i] = 1
			continue
		}
		out[i] = float64(maxN-n) / float64(maxN) * s.p.MaxBusyScore
	}
}

// OnDispatch implements profiles.DispatchHook.
func (s *ActiveRequestScorer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	var b *profiles.CounterBooking
	for _, p := range s.profs.Names() {
		t := res.Target(p)
		if t == nil {
			continue
		}
		b = s.c.Book(b, t)
	}
	if b != nil {
		req.Put(s.key, b)
	}
}

func (s *ActiveRequestScorer) release(req *profiles.Request) {
	if b, ok := req.Get(s.key).(*profiles.CounterBooking); ok {
		b.Release()
	}
}

// OnFinish implements profiles.FinishHook.
func (s *ActiveRequestScorer) OnFinish(req *profiles.Request, _ *profiles.Result, _ profiles.Usage) {
	s.release(req)
}

// OnFail implements profiles.FailHook.
func (s *ActiveRequestScorer) OnFail(req *profiles.Request, _ *profiles.Result, _ error) {
	s.release(req)
}

// OnEndpointAdded implements profiles.EndpointsHook.
func (s *ActiveRequestScorer) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook.
func (s *ActiveRequestScorer) OnEndpointRemoved(ep *profiles.Endpoint) { s.c.Drop(ep) }
