package prefill

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spillway-llm/spillway/profiles"
)

// InflightType is the in-flight load producer's plugin type.
const InflightType = "inflight-load-producer"

func init() { profiles.Register(InflightType, newInflight) }

// InflightParams are inflight-load-producer's parameters.
type InflightParams struct {
	AddEstimatedOutputTokens bool    `json:"addEstimatedOutputTokens"`
	OutputRatio              float64 `json:"outputRatio"`
	MaxEstimatedOutputTokens int     `json:"maxEstimatedOutputTokens"`
	// PrefillProfile names the profile whose pick computes the prefill of a
	// P/D request. Empty: the profile whose target has the prefill role
	// (llm-d.ai/role prefill or encode-prefill), else the primary profile.
	PrefillProfile string `json:"prefillProfile,omitempty"`
	// PrefixProducer names the prefix producer whose match gives the cached
	// tokens; empty = the last prefix producer that ran (none: all uncached).
	PrefixProducer string `json:"prefixProducer,omitempty"`
	// TTL is the janitor's backstop: bookings older than this are released.
	TTL profiles.Duration `json:"ttl"`
}

// Load is one endpoint's booked load. The zero value is ready.
type Load struct {
	requests atomic.Int64
	tokens   atomic.Int64
	gTok     prometheus.Gauge
	gReq     prometheus.Gauge
}

// Requests returns the in-flight requests.
func (l *Load) Requests() int64 { return l.requests.Load() }

// Tokens returns the in-flight tokens.
func (l *Load) Tokens() int64 { return l.tokens.Load() }

func (l *Load) add(reqs, toks int64) {
	if reqs != 0 {
		l.requests.Add(reqs)
		if l.gReq != nil {
			l.gReq.Add(float64(reqs))
		}
	}
	if toks != 0 {
		l.tokens.Add(toks)
		if l.gTok != nil {
			l.gTok.Add(float64(toks))
		}
	}
}

const loadAttr = "prefill/inflight"

// loadTable is a copy-on-write cache of endpoint → counters by
// Endpoint.Index, so that scorers reading every endpoint's load pay two
// pointer loads instead of a map lookup. A slot whose endpoint is not the
// one asked about (an index reused by another pool) falls back to the
// endpoint attribute, which is the source of truth.
var (
	loadTableMu sync.Mutex
	loadTable   atomic.Pointer[[]loadSlot]
)

type loadSlot struct {
	ep *profiles.Endpoint
	l  *Load
}

func cacheLoad(ep *profiles.Endpoint, l *Load) {
	if ep.Index < 0 || ep.Index > 1<<16 {
		return
	}
	loadTableMu.Lock()
	defer loadTableMu.Unlock()
	var cur []loadSlot
	if p := loadTable.Load(); p != nil {
		cur = *p
	}
	next := make([]loadSlot, max(len(cur), ep.Index+1))
	copy(next, cur)
	next[ep.Index] = loadSlot{ep, l}
	loadTable.Store(&next)
}

func loadFor(ep *profiles.Endpoint) *Load {
	if p := loadTable.Load(); p != nil && ep.Index >= 0 && ep.Index < len(*p) {
		if s := (*p)[ep.Index]; s.ep == ep {
			return s.l
		}
	}
	if v, ok := ep.Attr(loadAttr); ok {
		return v.(*Load)
	}
	return nil
}

// LoadOf returns the requests and tokens the router has in flight on ep,
// as booked by the inflight-load-producer (zero when none is configured).
func LoadOf(ep *profiles.Endpoint) (requests, tokens int64) {
	if l := loadFor(ep); l != nil {
		return l.requests.Load(), l.tokens.Load()
	}
	return 0, 0
}

// InflightProducer books per-endpoint load at dispatch and releases it as
// the request progresses; see OnDispatch for what is booked where.
type InflightProducer struct {
	profiles.Named
	p     InflightParams
	clock profiles.Clock
	m     *inflightMetrics

	mu       sync.Mutex
	bookings map[*profiles.Request]*booking
	stateKey string
}

// booking is what one request holds; each part is released exactly once.
type booking struct {
	mu     sync.Mutex
	at     time.Time
	pre    *Load // endpoint computing the prefill
	preTok int64
	preReq bool  // pre holds a request count of its own (P/D prefill leg)
	dec    *Load // endpoint streaming the response
	out    int64 // output estimate on dec
	// released flags
	preTokDone, preReqDone, decDone bool
}

func newInflight(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := InflightParams{OutputRatio: 1.5, TTL: profiles.Duration(30 * time.Minute)}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	switch {
	case p.OutputRatio < 0 || math.IsNaN(p.OutputRatio):
		return nil, fmt.Errorf("outputRatio must be ≥ 0, got %g", p.OutputRatio)
	case p.MaxEstimatedOutputTokens < 0:
		return nil, fmt.Errorf("maxEstimatedOutputTokens must be ≥ 0 (0 = no cap), got %d", p.MaxEstimatedOutputTokens)
	case p.TTL.Std() <= 0:
		return nil, fmt.Errorf("ttl must be > 0, got %s", p.TTL.Std())
	}
	ip := NewInflightProducer(name, p, h)
	go ip.janitor(h.Context())
	return ip, nil
}

// NewInflightProducer builds the producer without its janitor (tests and
// the simulator call Sweep themselves).
func NewInflightProducer(name string, p InflightParams, h profiles.Handle) *InflightProducer {
	ip := &InflightProducer{Named: profiles.NewNamed(InflightType, name), p: p, clock: h.Clock(),
		m: newInflightMetrics(h.Registerer()), bookings: map[*profiles.Request]*booking{}}
	ip.stateKey = "prefill/booking/" + ip.TN.Name
	return ip
}

// Params implements profiles.Parameterized.
func (ip *InflightProducer) Params() any { return ip.p }

// Order implements profiles.ProducerOrder.
func (ip *InflightProducer) Order() int { return 30 }

// Produce implements profiles.Producer; booking happens at dispatch.
func (ip *InflightProducer) Produce(context.Context, *profiles.Request, []*profiles.Endpoint) error {
	return nil
}

// load returns ep's counters, shared through the endpoint so that scorers
// and other packages read them with LoadOf (and a reloaded config keeps
// counting the requests already in flight).
func (ip *InflightProducer) load(ep *profiles.Endpoint) *Load {
	if l := loadFor(ep); l != nil {
		return l
	}
	ip.mu.Lock()
	defer ip.mu.Unlock()
	if v, ok := ep.Attr(loadAttr); ok {
		return v.(*Load)
	}
	l := &Load{gTok: ip.m.tokens.WithLabelValues(ep.Name), gReq: ip.m.requests.WithLabelValues(ep.Name)}
	ep.SetAttr(loadAttr, l)
	cacheLoad(ep, l)
	return l
}

func (ip *InflightProducer) prefillEndpoint(res *profiles.Result) *profiles.Endpoint {
	if ip.p.PrefillProfile != "" {
		if t := res.Target(ip.p.PrefillProfile); t != nil {
			return t
		}
		return res.Target(res.Primary)
	}
	if len(res.Profiles) > 1 {
		for name, pr := range res.Profiles {
			if name == res.Primary {
				continue
			}
			if t := pr.Target(); t != nil && t.HasRole(profiles.RolePrefill, profiles.RoleEncodePrefill) {
				return t
			}
		}
	}
	return res.Target(res.Primary)
}

func (ip *InflightProducer) match(req *profiles.Request) *Match {
	if ip.p.PrefixProducer != "" {
		return MatchesOf(req, ip.p.PrefixProducer)
	}
	return Matches(req)
}

// EstimatedOutput is the output estimate booked when
// addEstimatedOutputTokens is on: round(prompt × outputRatio), capped by
// the request's max tokens and maxEstimatedOutputTokens.
func (ip *InflightProducer) EstimatedOutput(req *profiles.Request, promptTokens int) int64 {
	if !ip.p.AddEstimatedOutputTokens {
		return 0
	}
	e := int64(math.Round(float64(promptTokens) * ip.p.OutputRatio))
	if req.MaxTokens > 0 {
		e = min(e, int64(req.MaxTokens))
	}
	if ip.p.MaxEstimatedOutputTokens > 0 {
		e = min(e, int64(ip.p.MaxEstimatedOutputTokens))
	}
	return e
}

// OnDispatch books the request: the prefill endpoint gets the prompt tokens
// it does not cache; the primary (decode) endpoint gets the request count
// and the output estimate. In P/D, where they differ, the prefill endpoint
// also counts the request until its prefill leg is done.
func (ip *InflightProducer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	dec := res.Target(res.Primary)
	if dec == nil {
		return
	}
	pre := ip.prefillEndpoint(res)
	if pre == nil {
		pre = dec
	}
	m := ip.match(req)
	var promptTokens int
	if m != nil {
		promptTokens = m.PromptTokens
	} else {
		_, promptTokens = RequestIDs(req)
	}
	uncached := promptTokens
	if m != nil {
		uncached = m.Uncached(pre)
	}
	b := &booking{at: ip.clock.Now(), pre: ip.load(pre), preTok: int64(max(uncached, 0)), dec: ip.load(dec)}
	b.out = ip.EstimatedOutput(req, promptTokens)
	b.preReq = pre != dec
	b.pre.add(b2i(b.preReq), b.preTok)
	b.dec.add(1, b.out)
	ip.mu.Lock()
	if old := ip.bookings[req]; old != nil {
		// Dispatched twice (a retry with the same request): release the
		// first booking rather than leak it.
		ip.release(old, true, true, true)
	}
	ip.bookings[req] = b
	ip.mu.Unlock()
	req.Put(ip.stateKey, b)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (ip *InflightProducer) booking(req *profiles.Request) *booking {
	b, _ := req.Get(ip.stateKey).(*booking)
	return b
}

// release frees the chosen parts that are still held.
func (ip *InflightProducer) release(b *booking, preTok, preReq, dec bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if preTok && !b.preTokDone {
		b.preTokDone = true
		b.pre.add(0, -b.preTok)
	}
	if preReq && !b.preReqDone {
		b.preReqDone = true
		b.pre.add(-b2i(b.preReq), 0)
	}
	if dec && !b.decDone {
		b.decDone = true
		b.dec.add(-1, -b.out)
	}
}

func (ip *InflightProducer) forget(req *profiles.Request, b *booking) {
	ip.mu.Lock()
	if ip.bookings[req] == b {
		delete(ip.bookings, req)
	}
	ip.mu.Unlock()
}

// OnFirstChunk implements profiles.FirstChunkHook: prefill is over.
func (ip *InflightProducer) OnFirstChunk(req *profiles.Request, _ *profiles.Result) {
	if b := ip.booking(req); b != nil {
		ip.release(b, true, false, false)
	}
}

// OnPrefillDone implements profiles.PrefillDoneHook: the prefill endpoint
// of a P/D request is done with it.
func (ip *InflightProducer) OnPrefillDone(req *profiles.Request, _ *profiles.Result) {
	if b := ip.booking(req); b != nil {
		ip.release(b, true, true, false)
	}
}

// OnFinish implements profiles.FinishHook.
func (ip *InflightProducer) OnFinish(req *profiles.Request, _ *profiles.Result, _ profiles.Usage) {
	if b := ip.booking(req); b != nil {
		ip.release(b, true, true, true)
		ip.forget(req, b)
	}
}

// OnFail implements profiles.FailHook: everything goes.
func (ip *InflightProducer) OnFail(req *profiles.Request, _ *profiles.Result, _ error) {
	if b := ip.booking(req); b != nil {
		ip.release(b, true, true, true)
		ip.forget(req, b)
	}
}

// Sweep releases bookings older than the TTL (requests whose end was never
// observed) and returns how many it released.
func (ip *InflightProducer) Sweep() int {
	cutoff := ip.clock.Now().Add(-ip.p.TTL.Std())
	var stale []*booking
	ip.mu.Lock()
	for r, b := range ip.bookings {
		if b.at.Before(cutoff) {
			stale = append(stale, b)
			delete(ip.bookings, r)
		}
	}
	ip.mu.Unlock()
	for _, b := range stale {
		ip.release(b, true, true, true)
	}
	return len(stale)
}

// Outstanding returns how many requests hold a booking.
func (ip *InflightProducer) Outstanding() int {
	ip.mu.Lock()
	defer ip.mu.Unlock()
	return len(ip.bookings)
}

// janitor sweeps on the wall clock (a quarter TTL, at most every minute).
// It is a backstop only: hooks release everything in normal operation.
func (ip *InflightProducer) janitor(ctx context.Context) {
	every := min(ip.p.TTL.Std()/4, time.Minute)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ip.Sweep()
		}
	}
}

// OnEndpointAdded implements profiles.EndpointsHook.
func (ip *InflightProducer) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook: drop its series
// (requests still in flight release into the counters, unexported).
func (ip *InflightProducer) OnEndpointRemoved(ep *profiles.Endpoint) {
	ip.m.tokens.DeleteLabelValues(ep.Name)
	ip.m.requests.DeleteLabelValues(ep.Name)
}
