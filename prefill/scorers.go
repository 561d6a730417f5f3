package prefill

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/spillway-llm/spillway/profiles"
)

// Scorer plugin types.
const (
	TokenLoadType   = "token-load-scorer"
	PrefixScoreType = "prefix-cache-scorer"
	NoHitLRUType    = "no-hit-lru-scorer"
)

func init() {
	profiles.Register(TokenLoadType, newTokenLoad)
	profiles.Register(PrefixScoreType, newPrefixScorer)
	profiles.Register(NoHitLRUType, newNoHitLRU)
}

// TokenLoadParams are token-load-scorer's parameters.
type TokenLoadParams struct {
	QueueThresholdTokens int64  `json:"queueThresholdTokens"`
	PrefixProducer       string `json:"prefixProducer,omitempty"`
}

// TokenLoadScorer scores 1 − min(load, Q)/Q with the look-ahead load: the
// endpoint's in-flight tokens plus this request's uncached tokens on it.
type TokenLoadScorer struct {
	profiles.Named
	p TokenLoadParams
}

func newTokenLoad(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := TokenLoadParams{QueueThresholdTokens: 4194304}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.QueueThresholdTokens < 1 {
		return nil, fmt.Errorf("queueThresholdTokens must be ≥ 1, got %d", p.QueueThresholdTokens)
	}
	return &TokenLoadScorer{Named: profiles.NewNamed(TokenLoadType, name), p: p}, nil
}

// Params implements profiles.Parameterized.
func (s *TokenLoadScorer) Params() any { return s.p }

// Score implements profiles.Scorer.
func (s *TokenLoadScorer) Score(_ context.Context, _ *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	var m *Match
	if s.p.PrefixProducer != "" {
		m = MatchesOf(req, s.p.PrefixProducer)
	} else {
		m = Matches(req)
	}
	own := 0
	if m == nil {
		_, own = RequestIDs(req)
	}
	q := float64(s.p.QueueThresholdTokens)
	for i, e := range eps {
		_, tok := LoadOf(e)
		load := float64(tok)
		if m != nil {
			load += float64(m.Uncached(e))
		} else {
			load += float64(own)
		}
		out[i] = 1 - min(max(load, 0), q)/q
	}
}

// PrefixScorerParams are prefix-cache-scorer's parameters.
type PrefixScorerParams struct {
	// MatchLengthWeight w ∈ [0,1] blends the matched fraction with the
	// absolute matched length: score = (1−w)·matched/total +
	// w·min(1, matchedTokens/matchLengthScaleTokens). 0 (default) is the
	// plain fraction, as llm-d scores.
	MatchLengthWeight float64 `json:"matchLengthWeight"`
	// MatchLengthScaleTokens is the matched length that earns the full
	// length score (default 8192, one chunk).
	MatchLengthScaleTokens int    `json:"matchLengthScaleTokens"`
	PrefixProducer         string `json:"prefixProducer,omitempty"`
}

// PrefixScorer scores each endpoint's matched share of the prompt.
type PrefixScorer struct {
	profiles.Named
	p PrefixScorerParams
}

func newPrefixScorer(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := PrefixScorerParams{MatchLengthScaleTokens: 8192}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if !(p.MatchLengthWeight >= 0 && p.MatchLengthWeight <= 1) {
		return nil, fmt.Errorf("matchLengthWeight must be in [0, 1], got %g", p.MatchLengthWeight)
	}
	if p.MatchLengthScaleTokens < 1 {
		return nil, fmt.Errorf("matchLengthScaleTokens must be ≥ 1, got %d", p.MatchLengthScaleTokens)
	}
	return &PrefixScorer{Named: profiles.NewNamed(PrefixScoreType, name), p: p}, nil
}

// Params implements profiles.Parameterized.
func (s *PrefixScorer) Params() any { return s.p }

func (s *PrefixScorer) match(req *profiles.Request) *Match {
	if s.p.PrefixProducer != "" {
		return MatchesOf(req, s.p.PrefixProducer)
	}
	return Matches(req)
}

// Score implements profiles.Scorer.
func (s *PrefixScorer) Score(_ context.Context, _ *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	m := s.match(req)
	if m == nil {
		return
	}
	w := s.p.MatchLengthWeight
	for i, e := range eps {
		_, _, mt := m.Of(e)
		out[i] = (1-w)*m.Fraction(e) + w*min(1, float64(mt)/float64(s.p.MatchLengthScaleTokens))
	}
}

// NoHitLRUParams are no-hit-lru-scorer's parameters.
type NoHitLRUParams struct {
	PrefixPluginType string `json:"prefixPluginType"`
	PrefixPluginName string `json:"prefixPluginName"`
	LRUSize          int    `json:"lruSize"`
}

// NoHitLRUScorer spreads cold requests (no endpoint caches any block):
// endpoints that received a cold request least recently score highest, one
// never used scores 1. Warm requests score 0.5 everywhere so that the prefix
// scorer decides.
type NoHitLRUScorer struct {
	profiles.Named
	p        NoHitLRUParams
	producer string // prefix producer whose match decides cold/warm; "" = default
	coldKey  string

	mu   sync.Mutex
	tick uint64
	last map[string]uint64 // endpoint name → tick of its last cold request
}

func newNoHitLRU(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := NoHitLRUParams{PrefixPluginType: PrefixScoreType, LRUSize: 1024}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.LRUSize < 1 {
		return nil, fmt.Errorf("lruSize must be ≥ 1, got %d", p.LRUSize)
	}
	s := &NoHitLRUScorer{Named: profiles.NewNamed(NoHitLRUType, name), p: p, last: map[string]uint64{}}
	s.coldKey = "prefill/cold/" + s.TN.Name
	return s, nil
}

// Bind implements profiles.Binder: find the prefix plugin.
func (s *NoHitLRUScorer) Bind(h profiles.Handle) error {
	if s.p.PrefixPluginName == "" {
		return nil
	}
	pl, ok := h.Plugin(s.p.PrefixPluginName)
	if !ok {
		return fmt.Errorf("prefixPluginName %q names no plugin in the plugins list", s.p.PrefixPluginName)
	}
	if t := pl.TypedName().Type; s.p.PrefixPluginType != "" && t != s.p.PrefixPluginType {
		return fmt.Errorf("prefixPluginName %q is a %s, prefixPluginType says %s", s.p.PrefixPluginName, t, s.p.PrefixPluginType)
	}
	switch v := pl.(type) {
	case *ApproxProducer, *PreciseProducer:
		s.producer = pl.TypedName().Name
	case *PrefixScorer:
		s.producer = v.p.PrefixProducer
	default:
		return fmt.Errorf("prefixPluginName %q (type %s) is not a prefix producer or prefix-cache-scorer", s.p.PrefixPluginName, pl.TypedName().Type)
	}
	return nil
}

// Params implements profiles.Parameterized.
func (s *NoHitLRUScorer) Params() any { return s.p }

// Score implements profiles.Scorer.
func (s *NoHitLRUScorer) Score(_ context.Context, cs *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	var m *Match
	if s.producer != "" {
		m = MatchesOf(req, s.producer)
	} else {
		m = Matches(req)
	}
	if m.Any() {
		for i := range out {
			out[i] = 0.5
		}
		return
	}
	if cs != nil {
		req.Put(s.coldKey, cs.Profile)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Rank by last use: never used first (score 1), then oldest.
	var oldest, newest uint64 = ^uint64(0), 0
	for _, e := range eps {
		if t, ok := s.last[e.Name]; ok {
			oldest, newest = min(oldest, t), max(newest, t)
		}
	}
	for i, e := range eps {
		t, ok := s.last[e.Name]
		switch {
		case !ok:
			out[i] = 1
		case newest == oldest:
			out[i] = 0.5
		default:
			out[i] = 0.5 * float64(newest-t) / float64(newest-oldest)
		}
	}
}

// OnDispatch implements profiles.DispatchHook: a cold request's target
// becomes the most recently used.
func (s *NoHitLRUScorer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	profile, ok := req.Get(s.coldKey).(string)
	if !ok {
		return
	}
	t := res.Target(profile)
	if t == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick++
	s.last[t.Name] = s.tick
	if len(s.last) > s.p.LRUSize {
		var victim string
		oldest := ^uint64(0)
		for n, v := range s.last {
			if v < oldest {
				victim, oldest = n, v
			}
		}
		delete(s.last, victim)
	}
}
