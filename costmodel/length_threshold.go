package costmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/spillway-llm/spillway/profiles"
)

// LengthThresholdScorer is the paper's predicted-length heuristic baseline:
// a request predicted to generate at least thresholdTokens is "long" and
// goes where the fewest long requests are in flight; a short one goes where
// the fewest requests of any length are.
type LengthThresholdScorer struct {
	profiles.Named
	p    lengthParams
	pred *BucketPredictor

	mu     sync.Mutex
	all    map[*profiles.Endpoint]int
	long   map[*profiles.Endpoint]int
	booked map[*profiles.Request]lengthBooking
	key    string
}

type lengthParams struct {
	ThresholdTokens     float64 `json:"thresholdTokens"`
	DefaultOutputTokens float64 `json:"defaultOutputTokens"`
	// InjectedPredictionError is for benchmarks, as in marginal-cost-scorer.
	InjectedPredictionError float64 `json:"injectedPredictionError,omitempty"`
}

type lengthBooking struct {
	ep   *profiles.Endpoint
	long bool
}

type lengthState struct {
	profile string
	long    bool
}

func init() {
	profiles.Register("length-threshold-scorer", func(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
		p := lengthParams{ThresholdTokens: 1024, DefaultOutputTokens: 256}
		if err := profiles.DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		if p.ThresholdTokens <= 0 {
			return nil, fmt.Errorf("thresholdTokens must be > 0, got %g", p.ThresholdTokens)
		}
		pred := NewBucketPredictor(p.DefaultOutputTokens)
		pred.InjectedError = p.InjectedPredictionError
		return &LengthThresholdScorer{
			Named: profiles.NewNamed("length-threshold-scorer", name), p: p, pred: pred,
			all: map[*profiles.Endpoint]int{}, long: map[*profiles.Endpoint]int{},
			booked: map[*profiles.Request]lengthBooking{}, key: "length-threshold/" + name,
		}, nil
	})
}

// Params implements profiles.Parameterized.
func (s *LengthThresholdScorer) Params() any { return s.p }

// Score implements profiles.Scorer.
func (s *LengthThresholdScorer) Score(_ context.Context, cs *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	long := s.pred.Predict(req) >= s.p.ThresholdTokens
	counts := s.all
	if long {
		counts = s.long
	}
	s.mu.Lock()
	maxN := 0
	for _, e := range eps {
		maxN = max(maxN, counts[e])
	}
	for i, e := range eps {
		if maxN == 0 {
			out[i] = 1
		} else {
			out[i] = 1 - float64(counts[e])/float64(maxN+1)
		}
	}
	s.mu.Unlock()
	req.Put(s.key, lengthState{profile: cs.Profile, long: long})
}

// OnDispatch implements profiles.DispatchHook.
func (s *LengthThresholdScorer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	st, ok := req.Get(s.key).(lengthState)
	if !ok {
		return
	}
	ep := res.Target(st.profile)
	if ep == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.booked[req] = lengthBooking{ep: ep, long: st.long}
	s.all[ep]++
	if st.long {
		s.long[ep]++
	}
}

func (s *LengthThresholdScorer) release(req *profiles.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.booked[req]
	if !ok {
		return
	}
	delete(s.booked, req)
	s.all[b.ep]--
	if b.long {
		s.long[b.ep]--
	}
}

// OnFinish implements profiles.FinishHook.
func (s *LengthThresholdScorer) OnFinish(req *profiles.Request, _ *profiles.Result, u profiles.Usage) {
	s.release(req)
	if u.Reported {
		s.pred.Observe(req, u.CompletionTokens)
	}
}

// OnFail implements profiles.FailHook.
func (s *LengthThresholdScorer) OnFail(req *profiles.Request, _ *profiles.Result, _ error) {
	s.release(req)
}

// OnEndpointAdded implements profiles.EndpointsHook.
func (s *LengthThresholdScorer) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook.
func (s *LengthThresholdScorer) OnEndpointRemoved(ep *profiles.Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.all, ep)
	delete(s.long, ep)
	for r, b := range s.booked {
		if b.ep == ep {
			delete(s.booked, r)
		}
	}
}
