package costmodel

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// LatencyPredictor predicts TTFT and TPOT per endpoint from its live state,
// with a linear model fitted online (ridge least squares over a sliding
// window of observed responses, refitted every refitEvery samples). Until
// enough samples arrive it predicts from the calibrated costs.
//
// TTFT features: 1, queued prefill tokens (booked, not yet prefilled; 10k
// units), this request's prompt tokens the endpoint does not cache (10k
// units; from the prefix producer's match), running sequences, KV-cache
// usage. TPOT features: 1, running sequences, KV-cache usage.
type LatencyPredictor struct {
	profiles.Named
	p     latencyParams
	clock profiles.Clock

	mu      sync.Mutex
	ttftB   []float64
	tpotB   []float64
	ttftX   [][]float64
	ttftY   []float64
	tpotX   [][]float64
	tpotY   []float64
	pending int
	fits    int
	book    map[*profiles.Endpoint]map[*profiles.Request]*latBooking
	key     string

	absErr   *prometheus.HistogramVec
	mape     *prometheus.GaugeVec
	mapeEWMA [2]float64
	// errSum / errN: every observed relative error since the start, for
	// benchmark reports (the gauge is the recent, weighted one).
	errSum [2]float64
	errN   [2]int
}

type latencyParams struct {
	// Costs are the prior until enough samples arrive; CalibrationMatrix +
	// Fingerprint take them from a calibration matrix row instead.
	Costs
	CalibrationRef
	CostSource string  `json:"costSource,omitempty"`
	Window     int     `json:"window"`
	RefitEvery int     `json:"refitEvery"`
	MinSamples int     `json:"minSamples"`
	Ridge      float64 `json:"ridge"`
	// Profiles whose picks are booked (queued prefill tokens); default:
	// the primary profile.
	Profiles   []string          `json:"profiles,omitempty"`
	RequestTTL profiles.Duration `json:"requestTTL"`
}

type latBooking struct {
	prompt     float64
	first      bool
	dispatched time.Time
	firstAt    time.Time
	ttftX      []float64
	tpotX      []float64
	predTTFT   float64
}

// Prediction is one endpoint's predicted latency for a request.
type Prediction struct {
	TTFT time.Duration
	TPOT time.Duration
}

type latState struct {
	preds map[*profiles.Endpoint]latPred
}

type latPred struct {
	Prediction
	ttftX, tpotX []float64
}

func init() {
	profiles.Register("latency-predictor", newLatencyPredictor)
	profiles.Register("latency-scorer", newLatencyScorer)
}

func newLatencyPredictor(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := latencyParams{Costs: DefaultCosts, Window: 2048, RefitEvery: 64, MinSamples: 32, Ridge: 1e-6, RequestTTL: profiles.Duration(10 * time.Minute)}
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
	if p.Window < 8 || p.RefitEvery < 1 || p.MinSamples < 6 || p.MinSamples > p.Window {
		return nil, fmt.Errorf("need window ≥ 8, refitEvery ≥ 1, 6 ≤ minSamples ≤ window (got %d, %d, %d)", p.Window, p.RefitEvery, p.MinSamples)
	}
	reg := h.Registerer()
	lp := &LatencyPredictor{
		Named: profiles.NewNamed("latency-predictor", name), p: p, clock: h.Clock(),
		book: map[*profiles.Endpoint]map[*profiles.Request]*latBooking{},
		key:  "latency-predictor/" + name,
		absErr: profiles.RegisterCollector(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: profiles.MetricsNamespace, Name: "latency_predictor_relative_error",
			Help:    "|predicted − observed| / observed per finished request.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 2, 5},
		}, []string{"predictor", "target"})),
		mape: profiles.RegisterCollector(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: profiles.MetricsNamespace, Name: "latency_predictor_mape",
			Help: "Exponentially weighted mean absolute percentage error of the predictor.",
		}, []string{"predictor", "target"})),
	}
	// Prior: TTFT = (queued + prompt) / peak throughput + one step;
	// TPOT = step(running).
	per10k := 1e4 * p.PrefillSecondsPerToken
	lp.ttftB = []float64{p.DecodeStepBaseSeconds, per10k, per10k, 0, 0}
	lp.tpotB = []float64{p.DecodeStepBaseSeconds + p.DecodeStepPerSeqSeconds, p.DecodeStepPerSeqSeconds, 0}
	go janitor(h.Context(), p.RequestTTL.Std(), func() {
		now := lp.clock.Now()
		lp.mu.Lock()
		defer lp.mu.Unlock()
		for _, m := range lp.book {
			for r, b := range m {
				if now.Sub(b.dispatched) > lp.p.RequestTTL.Std() {
					delete(m, r)
				}
			}
		}
	})
	return lp, nil
}

// Params implements profiles.Parameterized.
func (l *LatencyPredictor) Params() any { return l.p }

// Order implements profiles.ProducerOrder: after token counts and prefix
// matches.
func (l *LatencyPredictor) Order() int { return 50 }

func (l *LatencyPredictor) promptTokens(req *profiles.Request) float64 {
	if req.Tokens.Counted {
		if req.Tokens.Weighted > 0 {
			return req.Tokens.Weighted
		}
		return float64(req.Tokens.Total())
	}
	return float64(len(req.PromptText()) / 4)
}

// Produce implements profiles.Producer: predictions for every candidate.
func (l *LatencyPredictor) Produce(_ context.Context, req *profiles.Request, eps []*profiles.Endpoint) error {
	prompt := l.promptTokens(req)
	st := &latState{preds: make(map[*profiles.Endpoint]latPred, len(eps))}
	l.mu.Lock()
	for _, ep := range eps {
		queued, running := 0.0, 0
		for _, b := range l.book[ep] {
			if !b.first {
				queued += b.prompt
			}
			running++
		}
		m := ep.Metrics()
		if !m.Stale && m.Running > running {
			running = m.Running
		}
		// The prompt feature is what this endpoint would compute: the
		// prefix it caches costs (almost) nothing, and cache hits are most
		// of the small TTFTs a percentage error is judged on.
		_, _, matched := prefill.MatchOf(req, ep)
		uncached := math.Max(prompt-float64(matched), 1)
		tx := []float64{1, queued / 1e4, uncached / 1e4, float64(running), m.KVUsage}
		px := []float64{1, float64(running), m.KVUsage}
		ttft := math.Max(dot(l.ttftB, tx), 0.001)
		tpot := math.Max(dot(l.tpotB, px), 0.0005)
		st.preds[ep] = latPred{Prediction: Prediction{TTFT: secs(ttft), TPOT: secs(tpot)}, ttftX: tx, tpotX: px}
	}
	l.mu.Unlock()
	req.Put(l.key, st)
	return nil
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Predict returns the prediction Produce made for ep.
func (l *LatencyPredictor) Predict(req *profiles.Request, ep *profiles.Endpoint) (Prediction, bool) {
	st, _ := req.Get(l.key).(*latState)
	if st == nil {
		return Prediction{}, false
	}
	p, ok := st.preds[ep]
	return p.Prediction, ok
}

// PredictTTFT returns the predicted TTFT for ep, for the affinity filter's
// latencyPredictor source.
func (l *LatencyPredictor) PredictTTFT(req *profiles.Request, ep *profiles.Endpoint) (time.Duration, bool) {
	p, ok := l.Predict(req, ep)
	return p.TTFT, ok
}

// OnDispatch implements profiles.DispatchHook.
func (l *LatencyPredictor) OnDispatch(req *profiles.Request, res *profiles.Result) {
	st, _ := req.Get(l.key).(*latState)
	if st == nil {
		return
	}
	names := l.p.Profiles
	if len(names) == 0 {
		names = []string{res.Primary}
	}
	now := l.clock.Now()
	prompt := l.promptTokens(req)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range names {
		ep := res.Target(n)
		if ep == nil {
			continue
		}
		pr := st.preds[ep]
		m := l.book[ep]
		if m == nil {
			m = map[*profiles.Request]*latBooking{}
			l.book[ep] = m
		}
		uncached := prompt
		if len(pr.ttftX) > 2 {
			uncached = pr.ttftX[2] * 1e4
		}
		m[req] = &latBooking{prompt: uncached, dispatched: now, ttftX: pr.ttftX, tpotX: pr.tpotX, predTTFT: pr.TTFT.Seconds()}
	}
}

// OnFirstChunk implements profiles.FirstChunkHook.
func (l *LatencyPredictor) OnFirstChunk(req *profiles.Request, _ *profiles.Result) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.book {
		if b := m[req]; b != nil {
			b.first, b.firstAt = true, now
		}
	}
}

// OnFinish implements profiles.FinishHook: learn from the observed latency.
func (l *LatencyPredictor) OnFinish(req *profiles.Request, _ *profiles.Result, u profiles.Usage) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.book {
		b := m[req]
		if b == nil {
			continue
		}
		delete(m, req)
		ttft := u.TTFT.Seconds()
		if ttft <= 0 && b.first {
			ttft = b.firstAt.Sub(b.dispatched).Seconds()
		}
		if ttft > 0 && b.ttftX != nil {
			l.observe(0, b.predTTFT, ttft)
			l.ttftX, l.ttftY = appendWindow(l.ttftX, l.ttftY, b.ttftX, ttft, l.p.Window)
			if u.CompletionTokens > 1 && b.first {
				tpot := now.Sub(b.firstAt).Seconds() / float64(u.CompletionTokens-1)
				if tpot > 0 {
					l.observe(1, dot(l.tpotB, b.tpotX), tpot)
					l.tpotX, l.tpotY = appendWindow(l.tpotX, l.tpotY, b.tpotX, tpot, l.p.Window)
				}
			}
			l.pending++
		}
	}
	if l.pending >= l.p.RefitEvery {
		l.pending = 0
		l.refit()
	}
}

func appendWindow(xs [][]float64, ys []float64, x []float64, y float64, window int) ([][]float64, []float64) {
	xs, ys = append(xs, x), append(ys, y)
	if len(xs) > window {
		xs, ys = xs[len(xs)-window:], ys[len(ys)-window:]
	}
	return xs, ys
}

func (l *LatencyPredictor) observe(target int, pred, actual float64) {
	name := [2]string{"ttft", "tpot"}[target]
	rel := math.Abs(pred-actual) / actual
	l.errSum[target] += rel
	l.errN[target]++
	l.absErr.WithLabelValues(l.TypedName().Name, name).Observe(rel)
	if l.mapeEWMA[target] == 0 {
		l.mapeEWMA[target] = rel
	} else {
		l.mapeEWMA[target] += 0.05 * (rel - l.mapeEWMA[target])
	}
	l.mape.WithLabelValues(l.TypedName().Name, name).Set(l.mapeEWMA[target])
}

func (l *LatencyPredictor) refit() {
	if len(l.ttftX) >= l.p.MinSamples {
		if b, err := ridgeFit(l.ttftX, l.ttftY, l.p.Ridge); err == nil {
			l.ttftB = b
			l.fits++
		}
	}
	if len(l.tpotX) >= l.p.MinSamples {
		if b, err := ridgeFit(l.tpotX, l.tpotY, l.p.Ridge); err == nil {
			l.tpotB = b
		}
	}
}

// MAPE returns the running TTFT and TPOT mean absolute percentage errors.
func (l *LatencyPredictor) MAPE() (ttft, tpot float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mapeEWMA[0], l.mapeEWMA[1]
}

// PredictionError is the predictor's mean absolute percentage error over
// every observed response so far (fractions: 0.25 = 25%).
type PredictionError struct {
	TTFTMAPE    float64 `json:"ttftMape"`
	TPOTMAPE    float64 `json:"tpotMape"`
	TTFTSamples int     `json:"ttftSamples"`
	TPOTSamples int     `json:"tpotSamples"`
}

// MeanError returns the mean absolute percentage errors since the start.
func (l *LatencyPredictor) MeanError() PredictionError {
	l.mu.Lock()
	defer l.mu.Unlock()
	var e PredictionError
	e.TTFTSamples, e.TPOTSamples = l.errN[0], l.errN[1]
	if l.errN[0] > 0 {
		e.TTFTMAPE = l.errSum[0] / float64(l.errN[0])
	}
	if l.errN[1] > 0 {
		e.TPOTMAPE = l.errSum[1] / float64(l.errN[1])
	}
	return e
}

// Fits returns how many times the TTFT model was refitted.
func (l *LatencyPredictor) Fits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fits
}

// OnFail implements profiles.FailHook.
func (l *LatencyPredictor) OnFail(req *profiles.Request, _ *profiles.Result, _ error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.book {
		delete(m, req)
	}
}

// OnEndpointAdded implements profiles.EndpointsHook.
func (l *LatencyPredictor) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook.
func (l *LatencyPredictor) OnEndpointRemoved(ep *profiles.Endpoint) {
	l.mu.Lock()
	delete(l.book, ep)
	l.mu.Unlock()
}

// Booked returns the requests booked on ep.
func (l *LatencyPredictor) Booked(ep *profiles.Endpoint) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.book[ep])
}

// SLO request headers, in milliseconds.
const (
	HeaderSLOTTFT = "x-slo-ttft-ms"
	HeaderSLOTPOT = "x-slo-tpot-ms"
)

type latencyScorerParams struct {
	TTFTWeight    float64 `json:"ttftWeight"`
	TPOTWeight    float64 `json:"tpotWeight"`
	PredictorName string  `json:"predictorName"`
}

// LatencyScorer scores predicted TTFT and TPOT: against the request's SLO
// headers as headroom when they are set (score 0.5 at the SLO, 1 at zero
// latency, 0 at twice the SLO), else as min/value across candidates.
type LatencyScorer struct {
	profiles.Named
	p    latencyScorerParams
	pred *LatencyPredictor
}

func newLatencyScorer(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := latencyScorerParams{TTFTWeight: 0.8, TPOTWeight: 0.2, PredictorName: "latency-predictor"}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.TTFTWeight < 0 || p.TPOTWeight < 0 || p.TTFTWeight+p.TPOTWeight == 0 {
		return nil, fmt.Errorf("ttftWeight and tpotWeight must be ≥ 0 and not both 0")
	}
	return &LatencyScorer{Named: profiles.NewNamed("latency-scorer", name), p: p}, nil
}

// Params implements profiles.Parameterized.
func (s *LatencyScorer) Params() any { return s.p }

// Bind implements profiles.Binder.
func (s *LatencyScorer) Bind(h profiles.Handle) error {
	p, ok := h.Plugin(s.p.PredictorName)
	if !ok {
		return fmt.Errorf("predictorName %q: no such plugin; add a latency-predictor to the plugins list", s.p.PredictorName)
	}
	lp, ok := p.(*LatencyPredictor)
	if !ok {
		return fmt.Errorf("predictorName %q is a %s, not a latency-predictor", s.p.PredictorName, p.TypedName().Type)
	}
	s.pred = lp
	return nil
}

func headerMs(req *profiles.Request, name string) float64 {
	var v float64
	if s := req.Headers[name]; s != "" {
		if _, err := fmt.Sscanf(s, "%g", &v); err != nil || v <= 0 {
			return 0
		}
	}
	return v / 1000
}

// Score implements profiles.Scorer.
func (s *LatencyScorer) Score(_ context.Context, cs *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	ttft := make([]float64, len(eps))
	tpot := make([]float64, len(eps))
	minT, minP := math.Inf(1), math.Inf(1)
	for i, ep := range eps {
		p, ok := s.pred.Predict(req, ep)
		if !ok {
			continue
		}
		ttft[i], tpot[i] = p.TTFT.Seconds(), p.TPOT.Seconds()
		minT, minP = math.Min(minT, ttft[i]), math.Min(minP, tpot[i])
	}
	sloT, sloP := headerMs(req, HeaderSLOTTFT), headerMs(req, HeaderSLOTPOT)
	wsum := s.p.TTFTWeight + s.p.TPOTWeight
	for i := range eps {
		if ttft[i] == 0 {
			out[i] = 0
			continue
		}
		out[i] = (s.p.TTFTWeight*part(ttft[i], minT, sloT) + s.p.TPOTWeight*part(tpot[i], minP, sloP)) / wsum
	}
	if req.Debug() {
		req.Annotate(cs.Profile, s.TypedName().Name, fmt.Sprintf("best predicted TTFT %.3fs TPOT %.4fs (SLO ttft %.3fs tpot %.4fs)", minT, minP, sloT, sloP))
	}
}

func part(v, best, slo float64) float64 {
	if slo > 0 {
		return math.Max(0, math.Min(1, 1-0.5*v/slo))
	}
	if v <= 0 {
		return 1
	}
	return best / v
}
