package costmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

// SLOClassHeader names the request's SLO class; classes listed in
// sloMultipliers weigh their own latency more.
const SLOClassHeader = "x-spillway-slo-class"

// GuardParams configure the scarcity guard. Greedy cost minimisation
// concentrates load on the cheapest endpoint when the pool is narrow or
// starved (the paper's 1 prefill / 2 decode collapse); the guard then
// spreads: power-of-two-choices sampling in pools of ≥ 3, blind rotation
// (round-robin) in narrower ones, where the paper found blind spreading
// better and where two-choice sampling would be the greedy choice itself.
type GuardParams struct {
	// Mode: auto (engage below minPoolWidth or above loadThreshold: p2c in
	// pools of ≥ 3, spread below), p2c, spread (blind rotation),
	// admission (cap on in-flight imbalance), or off.
	Mode string `json:"mode"`
	// MinPoolWidth: auto engages when fewer candidates are left.
	MinPoolWidth int `json:"minPoolWidth"`
	// LoadThreshold: auto engages when the mean running sequences per
	// candidate exceed it.
	LoadThreshold float64 `json:"loadThreshold"`
	// SpreadWhenSaturated: in auto mode, rotate blindly while every
	// candidate's engine reports a waiting queue (the pool is starved;
	// greedy pricing would pile onto the endpoint that looks cheapest).
	SpreadWhenSaturated bool `json:"spreadWhenSaturated"`
	// MaxImbalance: the admission cap lets an endpoint take a request only
	// while it has at most this many more in-flight requests than the
	// least loaded one.
	MaxImbalance int `json:"maxImbalance"`
}

type marginalParams struct {
	Costs
	// CalibrationMatrix + Fingerprint take the costs from a calibration
	// matrix row instead (see CalibrationRef).
	CalibrationRef
	// CostSource records where the costs came from (for explanations).
	CostSource string `json:"costSource,omitempty"`
	// IncludePrefill prices the prompt's prefill on the candidate (set for
	// a prefill or colocated pool; a pure decode pool receives the KV).
	IncludePrefill bool `json:"includePrefill"`
	// DefaultOutputTokens is the predictor's prior.
	DefaultOutputTokens float64 `json:"defaultOutputTokens"`
	// KVWeight and KVHighWater shape the post-admission KV pressure term.
	KVWeight    float64 `json:"kvWeight"`
	KVHighWater float64 `json:"kvHighWater"`
	// SLOMultipliers by SLO class (header x-spillway-slo-class).
	SLOMultipliers map[string]float64 `json:"sloMultipliers,omitempty"`
	Guard          GuardParams        `json:"guard"`
	// InjectedPredictionError is for benchmarks: ±fraction noise on every
	// output-length prediction.
	InjectedPredictionError float64 `json:"injectedPredictionError,omitempty"`
	// RequestTTL is the backstop after which a booking that saw no end is
	// dropped.
	RequestTTL profiles.Duration `json:"requestTTL"`
}

// MarginalCostScorer prices each candidate by the completion time the
// request would add there and scores minCost / cost.
type MarginalCostScorer struct {
	profiles.Named
	p     marginalParams
	pred  OutputPredictor
	clock profiles.Clock

	mu   sync.Mutex
	eps  map[*profiles.Endpoint]*epState
	rnd  *rand.Rand
	key  string // per-request state key
	seen map[string]bool
	next int // spread guard's rotation

	guardEngaged *prometheus.CounterVec
}

type booking struct {
	output     float64
	prefill    float64
	dispatched time.Time
	first      time.Time
}

type epState struct {
	reqs map[*profiles.Request]*booking
}

type scoredState struct {
	profile string
	output  float64
	prefill map[*profiles.Endpoint]float64
}

func init() {
	profiles.Register("marginal-cost-scorer", newMarginalCostScorer)
}

func newMarginalCostScorer(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := marginalParams{
		Costs:               DefaultCosts,
		DefaultOutputTokens: 256,
		KVWeight:            1,
		KVHighWater:         0.8,
		SLOMultipliers:      map[string]float64{"tight": 2, "interactive": 2},
		Guard:               GuardParams{Mode: "auto", MinPoolWidth: 4, LoadThreshold: 0, MaxImbalance: 1, SpreadWhenSaturated: true},
		RequestTTL:          profiles.Duration(10 * time.Minute),
	}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.CostSource != "" {
		return nil, fmt.Errorf("costSource is reported, not set")
	}
	c, src, err := p.CalibrationRef.resolveCosts(h.ConfigDir(), p.Costs, raw)
	if err != nil {
		return nil, err
	}
	p.Costs, p.CostSource = c, src
	if p.Guard.MaxImbalance < 0 || p.Guard.MinPoolWidth < 0 || p.Guard.LoadThreshold < 0 {
		return nil, fmt.Errorf("guard: minPoolWidth, loadThreshold and maxImbalance must be ≥ 0")
	}
	switch p.Guard.Mode {
	case "auto", "p2c", "spread", "admission", "off":
	default:
		return nil, fmt.Errorf("guard.mode %q (accepted: auto, p2c, spread, admission, off)", p.Guard.Mode)
	}
	if p.KVHighWater < 0 || p.KVHighWater >= 1 {
		return nil, fmt.Errorf("kvHighWater must be in [0,1), got %g", p.KVHighWater)
	}
	if p.InjectedPredictionError < 0 {
		return nil, fmt.Errorf("injectedPredictionError must be ≥ 0, got %g", p.InjectedPredictionError)
	}
	pred := NewBucketPredictor(p.DefaultOutputTokens)
	pred.InjectedError = p.InjectedPredictionError
	s := &MarginalCostScorer{
		Named: profiles.NewNamed("marginal-cost-scorer", name),
		p:     p, pred: pred, clock: h.Clock(),
		eps: map[*profiles.Endpoint]*epState{},
		rnd: rand.New(rand.NewPCG(1, 2)),
		key: "marginal-cost/" + name,
		guardEngaged: profiles.RegisterCollector(h.Registerer(), prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: profiles.MetricsNamespace, Name: "marginal_cost_guard_total",
			Help: "Scheduling cycles in which the marginal-cost scarcity guard engaged, by mode.",
		}, []string{"scorer", "mode"})),
	}
	go janitor(h.Context(), p.RequestTTL.Std(), func() {
		now := s.clock.Now()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, e := range s.eps {
			for r, b := range e.reqs {
				if now.Sub(b.dispatched) > s.p.RequestTTL.Std() {
					delete(e.reqs, r)
				}
			}
		}
	})
	return s, nil
}

// Params implements profiles.Parameterized.
func (s *MarginalCostScorer) Params() any { return s.p }

// Seed implements profiles.Seeder.
func (s *MarginalCostScorer) Seed(v uint64) {
	s.mu.Lock()
	s.rnd = rand.New(rand.NewPCG(v, v^0xda942042e4dd58b5))
	s.mu.Unlock()
}

// Predictor returns the output-length predictor (swappable for tests).
func (s *MarginalCostScorer) Predictor() OutputPredictor { return s.pred }

// SetPredictor swaps the output-length predictor.
func (s *MarginalCostScorer) SetPredictor(p OutputPredictor) { s.pred = p }

func (s *MarginalCostScorer) candidate(ep *profiles.Endpoint, now time.Time) Candidate {
	m := ep.Metrics()
	c := Candidate{KVUsage: m.KVUsage}
	if m.NumGPUBlocks > 0 && m.BlockSize > 0 && !m.Stale {
		c.KVCapacityTokens = float64(m.NumGPUBlocks * m.BlockSize)
	}
	st := s.eps[ep]
	if st == nil {
		return c
	}
	running := 0
	for _, b := range st.reqs {
		if b.first.IsZero() {
			c.QueuedPrefillTokens += b.prefill
		}
		running++
	}
	c.Running = running
	step := s.p.Step(running)
	c.Remaining = make([]float64, 0, running)
	for _, b := range st.reqs {
		rem := b.output
		if !b.first.IsZero() {
			rem -= now.Sub(b.first).Seconds() / step
		}
		if rem > 0 {
			c.Remaining = append(c.Remaining, rem)
		}
	}
	return c
}

func (s *MarginalCostScorer) sloMultiplier(req *profiles.Request) float64 {
	if m, ok := s.p.SLOMultipliers[req.Headers[SLOClassHeader]]; ok {
		return m
	}
	return 1
}

func (s *MarginalCostScorer) prefillTokens(req *profiles.Request) float64 {
	if !s.p.IncludePrefill {
		return 0
	}
	if req.Tokens.Counted {
		if req.Tokens.Weighted > 0 {
			return req.Tokens.Weighted
		}
		return float64(req.Tokens.Total())
	}
	return float64(len(req.PromptText()) / 4)
}

// Score implements profiles.Scorer.
func (s *MarginalCostScorer) Score(_ context.Context, cs *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	output := s.pred.Predict(req)
	prefill := s.prefillTokens(req)
	w := Work{PrefillTokens: prefill, Output: output, KVTokens: float64(promptTokens(req)) + output, SLOMultiplier: s.sloMultiplier(req)}
	now := s.clock.Now()

	s.mu.Lock()
	costs := make([]float64, len(eps))
	inflight := make([]int, len(eps))
	totalRunning := 0
	for i, ep := range eps {
		c := s.candidate(ep, now)
		costs[i] = s.p.Price(c, w, s.p.KVWeight, s.p.KVHighWater).Total
		inflight[i] = c.Running
		totalRunning += c.Running
	}
	mode := s.guardMode(len(eps), totalRunning)
	if s.p.Guard.Mode == "auto" && mode != "spread" && s.p.Guard.SpreadWhenSaturated && saturated(eps) {
		mode = "spread"
	}
	var sample [2]int
	spreadTo := -1
	if mode == "spread" {
		spreadTo = s.next % len(eps)
		s.next++
	}
	if mode == "p2c" {
		sample[0] = s.rnd.IntN(len(eps))
		sample[1] = s.rnd.IntN(len(eps) - 1)
		if sample[1] >= sample[0] {
			sample[1]++
		}
	}
	s.mu.Unlock()

	minCost := math.Inf(1)
	for _, c := range costs {
		minCost = math.Min(minCost, c)
	}
	minInflight := math.MaxInt
	for _, n := range inflight {
		minInflight = min(minInflight, n)
	}
	for i := range eps {
		if costs[i] <= 0 {
			out[i] = 1
		} else {
			out[i] = minCost / costs[i]
		}
		switch mode {
		case "p2c":
			if i != sample[0] && i != sample[1] {
				out[i] = 0
			}
		case "admission":
			if inflight[i] > minInflight+s.p.Guard.MaxImbalance {
				out[i] = 0
			}
		case "spread":
			if i == spreadTo {
				out[i] = 1
			} else {
				out[i] = 0
			}
		}
	}
	if mode != "" {
		s.guardEngaged.WithLabelValues(s.TypedName().Name, mode).Inc()
	}
	req.Put(s.key, &scoredState{profile: cs.Profile, output: output, prefill: nil})
	if req.Debug() {
		req.Annotate(cs.Profile, s.TypedName().Name, fmt.Sprintf("predicted output %.0f tokens, min cost %.3fs, guard %q", output, minCost, mode))
	}
}

// guardMode returns "" when the guard does not engage.
func (s *MarginalCostScorer) guardMode(width, running int) string {
	g := s.p.Guard
	switch g.Mode {
	case "off":
		return ""
	case "p2c":
		if width < 3 {
			return "spread"
		}
		return "p2c"
	case "admission", "spread":
		return g.Mode
	}
	engage := width < g.MinPoolWidth || (g.LoadThreshold > 0 && float64(running)/float64(width) > g.LoadThreshold)
	if !engage || width < 2 {
		return ""
	}
	if width < 3 {
		return "spread"
	}
	return "p2c"
}

// OnDispatch implements profiles.DispatchHook: book the request on the
// endpoint the scorer's profile picked.
func (s *MarginalCostScorer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	st, _ := req.Get(s.key).(*scoredState)
	if st == nil {
		return
	}
	ep := res.Target(st.profile)
	if ep == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.eps[ep]
	if e == nil {
		e = &epState{reqs: map[*profiles.Request]*booking{}}
		s.eps[ep] = e
	}
	e.reqs[req] = &booking{output: st.output, prefill: s.prefillTokens(req), dispatched: s.clock.Now()}
}

func (s *MarginalCostScorer) each(req *profiles.Request, f func(ep *profiles.Endpoint, e *epState, b *booking)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ep, e := range s.eps {
		if b := e.reqs[req]; b != nil {
			f(ep, e, b)
		}
	}
}

// OnFirstChunk implements profiles.FirstChunkHook: prefill is done.
func (s *MarginalCostScorer) OnFirstChunk(req *profiles.Request, _ *profiles.Result) {
	now := s.clock.Now()
	s.each(req, func(_ *profiles.Endpoint, _ *epState, b *booking) { b.first = now })
}

// OnFinish implements profiles.FinishHook: release, and teach the predictor.
func (s *MarginalCostScorer) OnFinish(req *profiles.Request, _ *profiles.Result, u profiles.Usage) {
	s.each(req, func(_ *profiles.Endpoint, e *epState, _ *booking) { delete(e.reqs, req) })
	if u.Reported {
		s.pred.Observe(req, u.CompletionTokens)
	}
}

// OnFail implements profiles.FailHook.
func (s *MarginalCostScorer) OnFail(req *profiles.Request, _ *profiles.Result, _ error) {
	s.each(req, func(_ *profiles.Endpoint, e *epState, _ *booking) { delete(e.reqs, req) })
}

// OnEndpointAdded implements profiles.EndpointsHook.
func (s *MarginalCostScorer) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook.
func (s *MarginalCostScorer) OnEndpointRemoved(ep *profiles.Endpoint) {
	s.mu.Lock()
	delete(s.eps, ep)
	s.mu.Unlock()
}

// InFlight returns the requests booked on ep (for tests and metrics).
func (s *MarginalCostScorer) InFlight(ep *profiles.Endpoint) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.eps[ep]; e != nil {
		return len(e.reqs)
	}
	return 0
}

// saturated reports whether every candidate's engine has requests waiting
// (fresh metrics only).
func saturated(eps []*profiles.Endpoint) bool {
	for _, e := range eps {
		m := e.Metrics()
		if m.Stale || m.WaitingQueue == 0 {
			return false
		}
	}
	return len(eps) > 0
}
