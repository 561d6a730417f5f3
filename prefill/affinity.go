package prefill

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/spillway-llm/spillway/profiles"
)

// AffinityType is the affinity filter's plugin type.
const AffinityType = "prefix-cache-affinity-filter"

func init() { profiles.Register(AffinityType, newAffinity) }

// TTFT sources.
const (
	TTFTFromThroughput = "prefillThroughput"
	TTFTFromPredictor  = "latencyPredictor"
)

// TTFTPredictor predicts a request's time to first token on an endpoint
// (false: no prediction for that endpoint). A plugin implementing it is
// named by the filter's predictorRef when ttftSource is latencyPredictor;
// costmodel's latency-predictor does.
type TTFTPredictor interface {
	PredictTTFT(req *profiles.Request, ep *profiles.Endpoint) (time.Duration, bool)
}

// AffinityParams are prefix-cache-affinity-filter's parameters. Pointer
// fields tell "given" from "defaulted" for the mutual-exclusion check.
type AffinityParams struct {
	AffinityThreshold        float64      `json:"affinityThreshold"`
	ExplorationProbability   float64      `json:"explorationProbability"`
	PeakPrefillThroughput    *float64     `json:"peakPrefillThroughput,omitempty"`
	MaxTTFTPenaltyMs         *float64     `json:"maxTTFTPenaltyMs,omitempty"`
	TTFTSource               string       `json:"ttftSource"`
	MaxTokensInFlightPenalty float64      `json:"maxTokensInFlightPenalty,omitempty"`
	IncludeOwnUncachedTokens bool         `json:"includeOwnUncachedTokens"`
	PredictorRef             string       `json:"predictorRef,omitempty"`
	CalibrationMatrix        string       `json:"calibrationMatrix,omitempty"`
	Fingerprint              *Fingerprint `json:"fingerprint,omitempty"`
	// ChunkSize (max-num-batched-tokens) only labels τ in chunks; the
	// fingerprint's chunkSize wins when given.
	ChunkSize int `json:"chunkSize,omitempty"`
	// PrefixProducer names the prefix producer to read; empty = the last
	// prefix producer that ran.
	PrefixProducer string `json:"prefixProducer,omitempty"`
}

// Defaults (plugins.md).
const (
	DefaultAffinityThreshold     = 0.8
	DefaultPeakPrefillThroughput = 15928.0
	DefaultMaxTTFTPenaltyMs      = 18000.0
	DefaultChunkSize             = 8192
)

// AffinityFilter keeps the request on the endpoints that cache its prefix
// until the best of them is saturated: when its estimated TTFT exceeds the
// best cold endpoint's by more than maxTTFTPenaltyMs (with the throughput
// source: its in-flight uncached tokens exceed the best cold endpoint's by
// more than τ), every endpoint passes.
type AffinityFilter struct {
	profiles.Named
	p         AffinityParams
	cal       Calibration
	predictor TTFTPredictor
	m         *affinityMetrics
	rndMu     sync.Mutex
	rnd       *rand.Rand
}

// Decision is what one Filter call decided, for tests and traces.
type Decision struct {
	Outcome   string // sticky, released, no_sticky, explored
	Sticky    int    // size of the sticky set
	GapTokens float64
	GapMs     float64
	HasGap    bool // both a sticky and a non-sticky endpoint had an estimate
}

func newAffinity(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := AffinityParams{AffinityThreshold: DefaultAffinityThreshold, TTFTSource: TTFTFromThroughput}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	return NewAffinityFilter(name, p, h)
}

// NewAffinityFilter validates p and builds the filter.
func NewAffinityFilter(name string, p AffinityParams, h profiles.Handle) (*AffinityFilter, error) {
	switch {
	case !(p.AffinityThreshold > 0 && p.AffinityThreshold <= 1):
		return nil, fmt.Errorf("affinityThreshold must be in (0, 1], got %g", p.AffinityThreshold)
	case !(p.ExplorationProbability >= 0 && p.ExplorationProbability <= 1):
		return nil, fmt.Errorf("explorationProbability must be in [0, 1], got %g", p.ExplorationProbability)
	case p.TTFTSource != TTFTFromThroughput && p.TTFTSource != TTFTFromPredictor:
		return nil, fmt.Errorf("ttftSource %q (accepted: %s, %s)", p.TTFTSource, TTFTFromThroughput, TTFTFromPredictor)
	case p.MaxTokensInFlightPenalty < 0 || math.IsNaN(p.MaxTokensInFlightPenalty):
		return nil, fmt.Errorf("maxTokensInFlightPenalty must be ≥ 0 (0 = use maxTTFTPenaltyMs), got %g", p.MaxTokensInFlightPenalty)
	case p.MaxTokensInFlightPenalty > 0 && p.MaxTTFTPenaltyMs != nil:
		return nil, fmt.Errorf("maxTokensInFlightPenalty (τ in tokens) and maxTTFTPenaltyMs (τ = peakPrefillThroughput × maxTTFTPenaltyMs) are two forms of one threshold: set one")
	case p.MaxTokensInFlightPenalty > 0 && p.TTFTSource == TTFTFromPredictor:
		return nil, fmt.Errorf("maxTokensInFlightPenalty is a token gap and cannot be used with ttftSource %s (use maxTTFTPenaltyMs)", TTFTFromPredictor)
	case p.MaxTTFTPenaltyMs != nil && (*p.MaxTTFTPenaltyMs < 0 || math.IsNaN(*p.MaxTTFTPenaltyMs)):
		return nil, fmt.Errorf("maxTTFTPenaltyMs must be ≥ 0 (0 = never release), got %g", *p.MaxTTFTPenaltyMs)
	case p.ChunkSize < 0:
		return nil, fmt.Errorf("chunkSize must be ≥ 0, got %d", p.ChunkSize)
	case p.PredictorRef != "" && p.TTFTSource != TTFTFromPredictor:
		return nil, fmt.Errorf("predictorRef is only used with ttftSource %s", TTFTFromPredictor)
	case p.CalibrationMatrix != "" && p.PeakPrefillThroughput != nil:
		return nil, fmt.Errorf("peakPrefillThroughput and calibrationMatrix both set: give the measured value or the matrix row, not both")
	case (p.CalibrationMatrix == "") != (p.Fingerprint == nil):
		return nil, fmt.Errorf("calibrationMatrix and fingerprint go together (fingerprint {model, accelerator, engine, tp, chunkSize} selects the matrix row)")
	}
	chunk := p.ChunkSize
	if chunk == 0 {
		chunk = DefaultChunkSize
	}
	source := ""
	peak := DefaultPeakPrefillThroughput
	if p.PeakPrefillThroughput != nil {
		peak = *p.PeakPrefillThroughput
	}
	if p.CalibrationMatrix != "" {
		m, path, err := LoadMatrix(h.ConfigDir(), p.CalibrationMatrix)
		if err != nil {
			return nil, err
		}
		e, err := m.Lookup(*p.Fingerprint)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		peak = e.PeakPrefillThroughput
		chunk = e.ChunkSize
		source = "peakPrefillThroughput from " + p.CalibrationMatrix
	}
	if p.TTFTSource == TTFTFromThroughput && p.MaxTokensInFlightPenalty == 0 && !(peak > 0) {
		return nil, fmt.Errorf("peakPrefillThroughput must be > 0 with ttftSource %s, got %g", TTFTFromThroughput, peak)
	}
	ms := DefaultMaxTTFTPenaltyMs
	if p.MaxTTFTPenaltyMs != nil {
		ms = *p.MaxTTFTPenaltyMs
	}
	var cal Calibration
	if p.MaxTokensInFlightPenalty > 0 {
		cal = Calibration{TauTokens: p.MaxTokensInFlightPenalty, ChunkSize: chunk, Source: "maxTokensInFlightPenalty"}
		if p.PeakPrefillThroughput != nil || p.CalibrationMatrix != "" {
			cal.PeakPrefillThroughput = peak
			cal.MaxTTFTPenaltyMs = p.MaxTokensInFlightPenalty / peak * 1000
		}
	} else {
		cal = NewCalibration(peak, ms, chunk)
		cal.Source = source
	}
	// Show the resolved values in validate output.
	p.PeakPrefillThroughput, p.MaxTTFTPenaltyMs = &peak, &ms
	p.ChunkSize = chunk
	if p.MaxTokensInFlightPenalty > 0 {
		p.MaxTTFTPenaltyMs = nil
	}
	f := &AffinityFilter{Named: profiles.NewNamed(AffinityType, name), p: p, cal: cal,
		m: newAffinityMetrics(h.Registerer(), name), rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	f.TN.Type = AffinityType
	return f, nil
}

// Bind implements profiles.Binder: resolve the latency predictor.
func (f *AffinityFilter) Bind(h profiles.Handle) error {
	if f.p.TTFTSource != TTFTFromPredictor {
		return nil
	}
	if f.p.PredictorRef == "" {
		// llm-d configs name no predictor: use the config's only one.
		var found []string
		for _, p := range h.Plugins() {
			if pr, ok := p.(TTFTPredictor); ok {
				f.predictor = pr
				found = append(found, p.TypedName().Name)
			}
		}
		switch len(found) {
		case 1:
			f.p.PredictorRef = found[0]
			return nil
		case 0:
			return fmt.Errorf("ttftSource %s: no predictor is configured (add a plugin that implements prefill.TTFTPredictor, e.g. latency-predictor, or name one with predictorRef)", TTFTFromPredictor)
		default:
			f.predictor = nil
			return fmt.Errorf("ttftSource %s: several predictors (%v); name one with predictorRef", TTFTFromPredictor, found)
		}
	}
	p, ok := h.Plugin(f.p.PredictorRef)
	if !ok {
		return fmt.Errorf("predictorRef %q names no plugin in the plugins list", f.p.PredictorRef)
	}
	pr, ok := p.(TTFTPredictor)
	if !ok {
		return fmt.Errorf("predictorRef %q (type %s) does not predict TTFT", f.p.PredictorRef, p.TypedName().Type)
	}
	f.predictor = pr
	return nil
}

// SetPredictor sets the TTFT predictor directly (tests, the simulator).
func (f *AffinityFilter) SetPredictor(p TTFTPredictor) { f.predictor = p }

// Seed implements profiles.Seeder for repeatable exploration.
func (f *AffinityFilter) Seed(s uint64) {
	f.rndMu.Lock()
	f.rnd = rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	f.rndMu.Unlock()
}

// Params implements profiles.Parameterized.
func (f *AffinityFilter) Params() any { return f.p }

// Calibration returns the resolved threshold.
func (f *AffinityFilter) Calibration() Calibration { return f.cal }

// Describe implements profiles.Describer.
func (f *AffinityFilter) Describe() []string {
	lines := []string{fmt.Sprintf("sticky: endpoints caching ≥ %g of the prompt's blocks", f.p.AffinityThreshold)}
	if f.p.TTFTSource == TTFTFromPredictor {
		if *f.p.MaxTTFTPenaltyMs == 0 {
			lines = append(lines, "saturation release off (maxTTFTPenaltyMs 0)")
		} else {
			lines = append(lines, fmt.Sprintf("release when predicted TTFT of the best sticky endpoint exceeds the best other's by > %g ms (predictor %s)", *f.p.MaxTTFTPenaltyMs, f.p.PredictorRef))
		}
	} else {
		lines = append(lines, f.cal.Describe())
	}
	if f.p.IncludeOwnUncachedTokens {
		lines = append(lines, "load includes this request's own uncached tokens on each endpoint")
	}
	if f.p.ExplorationProbability > 0 {
		lines = append(lines, fmt.Sprintf("exploration: passes every endpoint with probability %g", f.p.ExplorationProbability))
	}
	return lines
}

func (f *AffinityFilter) match(req *profiles.Request) *Match {
	if f.p.PrefixProducer != "" {
		return MatchesOf(req, f.p.PrefixProducer)
	}
	return Matches(req)
}

// Filter implements profiles.Filter.
func (f *AffinityFilter) Filter(ctx context.Context, cs *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint) []*profiles.Endpoint {
	out, d := f.Decide(ctx, req, eps)
	f.m.stickySize.Observe(float64(d.Sticky))
	if d.HasGap {
		f.m.gap.Observe(d.GapMs / 1000)
	}
	switch d.Outcome {
	case "sticky":
		f.m.sticky.Inc()
	case "released":
		f.m.released.Inc()
	case "explored":
		f.m.explored.Inc()
	default:
		f.m.noSticky.Inc()
	}
	if req.Debug() {
		profile := ""
		if cs != nil {
			profile = cs.Profile
		}
		req.Annotate(profile, f.TN.Name, fmt.Sprintf("%s: sticky set %d of %d, in-flight gap %.0f tokens (%.0f ms), release %v, τ %.0f tokens",
			d.Outcome, d.Sticky, len(eps), d.GapTokens, d.GapMs, d.Outcome == "released", f.cal.TauTokens))
	}
	return out
}

// Decide is Filter without metrics and traces.
func (f *AffinityFilter) Decide(ctx context.Context, req *profiles.Request, eps []*profiles.Endpoint) ([]*profiles.Endpoint, Decision) {
	m := f.match(req)
	if m == nil || m.TotalBlocks == 0 {
		return eps, Decision{Outcome: "no_sticky"}
	}
	thr := f.p.AffinityThreshold
	nSticky := 0
	for _, e := range eps {
		if m.Fraction(e) >= thr {
			nSticky++
		}
	}
	if nSticky == 0 {
		return eps, Decision{Outcome: "no_sticky"}
	}
	if f.p.ExplorationProbability > 0 {
		f.rndMu.Lock()
		x := f.rnd.Float64()
		f.rndMu.Unlock()
		if x < f.p.ExplorationProbability {
			return eps, Decision{Outcome: "explored", Sticky: nSticky}
		}
	}
	d := Decision{Outcome: "sticky", Sticky: nSticky}
	if nSticky < len(eps) {
		bestS, bestN := math.Inf(1), math.Inf(1)
		for _, e := range eps {
			v := f.cost(ctx, req, m, e)
			if math.IsNaN(v) {
				continue // no prediction: the endpoint takes no part in the gap
			}
			if m.Fraction(e) >= thr {
				bestS = min(bestS, v)
			} else {
				bestN = min(bestN, v)
			}
		}
		d.HasGap = !math.IsInf(bestS, 1) && !math.IsInf(bestN, 1)
		if !d.HasGap {
			// One side has no estimate: keep the sticky set.
		} else if f.p.TTFTSource == TTFTFromPredictor {
			d.GapMs = bestS - bestN
			if *f.p.MaxTTFTPenaltyMs > 0 && d.GapMs > *f.p.MaxTTFTPenaltyMs {
				d.Outcome = "released"
			}
		} else {
			d.GapTokens = bestS - bestN
			d.GapMs = f.cal.GapMs(d.GapTokens)
			if f.cal.Releases(d.GapTokens) {
				d.Outcome = "released"
			}
		}
	}
	if d.Outcome == "released" || nSticky == len(eps) {
		return eps, d
	}
	out := make([]*profiles.Endpoint, 0, nSticky)
	for _, e := range eps {
		if m.Fraction(e) >= thr {
			out = append(out, e)
		}
	}
	return out, d
}

// cost is the endpoint's TTFT proxy: in-flight uncached tokens (plus this
// request's own when configured), or the predicted TTFT in ms.
func (f *AffinityFilter) cost(_ context.Context, req *profiles.Request, m *Match, e *profiles.Endpoint) float64 {
	if f.p.TTFTSource == TTFTFromPredictor {
		if f.predictor == nil {
			return math.NaN()
		}
		d, ok := f.predictor.PredictTTFT(req, e)
		if !ok {
			return math.NaN()
		}
		return float64(d) / float64(time.Millisecond)
	}
	_, tok := LoadOf(e)
	v := float64(tok)
	if f.p.IncludeOwnUncachedTokens {
		v += float64(m.Uncached(e))
	}
	return v
}
