package encode

import (
	"context"
	"encoding/json"

	"github.com/spillway-llm/spillway/profiles"
)

// QueueScorerType is the plugin type of the encoder queue-depth scorer.
const QueueScorerType = "encode-queue-scorer"

func init() { profiles.Register(QueueScorerType, newQueueScorer) }

// QueueScorer scores encoders by queue depth: the multimodal items the
// picker has in flight on each encoder plus its scraped waiting queue.
// Score = (maxD − d)/(maxD − minD) over the candidates; all equal → 1.
// The picker's own bookings matter because an encoder's scraped queue lags
// by a scrape interval while a burst of images lands within milliseconds.
//
// Items are booked at dispatch on the encoders the encode profile picked
// (one per item) and released when the encoder legs are over: at the end of
// the prefill leg, at the first response chunk, or when the request fails,
// whichever comes first.
type QueueScorer struct {
	profiles.Named
	key string
	c   *profiles.EndpointCounter

	profs profiles.ProfileSet // profiles this scorer has scored in
}

func newQueueScorer(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	var p struct{}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	s := &QueueScorer{Named: profiles.NewNamed(QueueScorerType, name), c: profiles.NewEndpointCounter()}
	s.key = "encode.queue/" + s.TypedName().Name
	return s, nil
}

// Depth returns the encoder's queue depth as the scorer sees it.
func (s *QueueScorer) Depth(ep *profiles.Endpoint) int {
	d := int(s.c.Count(ep))
	if m := ep.Metrics(); !m.Stale {
		d += m.WaitingQueue
	}
	return d
}

// InFlight returns the items the picker has in flight on ep.
func (s *QueueScorer) InFlight(ep *profiles.Endpoint) int { return int(s.c.Count(ep)) }

// Score implements profiles.Scorer. Items of the same request already
// placed on an encoder (profiles.EncodePlaced) count towards its depth, so
// that a request's images spread over the encoders.
func (s *QueueScorer) Score(_ context.Context, cs *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	if cs != nil {
		s.profs.Note(cs.Profile)
	}
	if len(eps) == 0 {
		return
	}
	placed := profiles.EncodePlaced(req)
	depth := func(e *profiles.Endpoint) int {
		d := s.Depth(e)
		for _, p := range placed {
			if p == e {
				d++
			}
		}
		return d
	}
	minD, maxD := depth(eps[0]), depth(eps[0])
	for i, e := range eps {
		d := depth(e)
		out[i] = float64(d) // stash the depth; normalised below
		minD, maxD = min(minD, d), max(maxD, d)
	}
	for i := range eps {
		if maxD == minD {
			out[i] = 1
			continue
		}
		out[i] = float64(maxD-int(out[i])) / float64(maxD-minD)
	}
}

// perItemTargets returns the encoders that serve the request's items. Under
// the disagg handler an encode profile's targets are one per item; a
// profile run once per request contributes its target only.
func perItemTargets(req *profiles.Request, pr *profiles.ProfileResult) []*profiles.Endpoint {
	if pr == nil || len(pr.Targets) == 0 {
		return nil
	}
	if n := len(req.Multimodal); n > 0 && len(pr.Targets) == n {
		return pr.Targets
	}
	return pr.Targets[:1]
}

// OnDispatch implements profiles.DispatchHook.
func (s *QueueScorer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	var b *profiles.CounterBooking
	for _, p := range s.profs.Names() {
		for _, t := range perItemTargets(req, res.Profiles[p]) {
			if t == nil {
				continue
			}
			b = s.c.Book(b, t)
		}
	}
	if b != nil {
		req.Put(s.key, b)
	}
}

func (s *QueueScorer) release(req *profiles.Request) {
	if b, ok := req.Get(s.key).(*profiles.CounterBooking); ok {
		b.Release()
	}
}

// OnPrefillDone implements profiles.PrefillDoneHook: encoder legs end
// before the prefill leg starts.
func (s *QueueScorer) OnPrefillDone(req *profiles.Request, _ *profiles.Result) { s.release(req) }

// OnFirstChunk implements profiles.FirstChunkHook (encode-decode requests
// have no prefill leg).
func (s *QueueScorer) OnFirstChunk(req *profiles.Request, _ *profiles.Result) { s.release(req) }

// OnFinish implements profiles.FinishHook.
func (s *QueueScorer) OnFinish(req *profiles.Request, _ *profiles.Result, _ profiles.Usage) {
	s.release(req)
}

// OnFail implements profiles.FailHook.
func (s *QueueScorer) OnFail(req *profiles.Request, _ *profiles.Result, _ error) { s.release(req) }

// OnEndpointAdded implements profiles.EndpointsHook.
func (s *QueueScorer) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook.
func (s *QueueScorer) OnEndpointRemoved(ep *profiles.Endpoint) { s.c.Drop(ep) }
