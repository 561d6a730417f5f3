package sim

import (
	"fmt"
	"time"
)

// Loop is a discrete-event clock: events run in virtual-time order (FIFO
// among equal times), single-threaded, as fast as the CPU allows.
type Loop struct {
	epoch time.Time
	now   int64
	seq   uint64
	q     []event
	engs  []*Engine
	fns   []func()
	free  []int32
}

// event is pointer-free (index into engs or fns) so heap moves need no
// write barriers.
type event struct {
	at   int64
	seq  uint64
	gen  uint64
	idx  int32
	kind uint8
}

const (
	evFunc uint8 = iota
	evStepStart
	evStepEnd
)

// NewLoop starts a virtual clock at epoch (zero time = 2026-01-01 UTC).
func NewLoop(epoch time.Time) *Loop {
	if epoch.IsZero() {
		epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return &Loop{epoch: epoch}
}

// Now is the current virtual time.
func (l *Loop) Now() time.Time { return l.epoch.Add(time.Duration(l.now)) }

// Epoch is virtual time zero.
func (l *Loop) Epoch() time.Time { return l.epoch }

// Elapsed is virtual time since the epoch.
func (l *Loop) Elapsed() time.Duration { return time.Duration(l.now) }

// At runs fn at virtual time t (now, if t is in the past).
func (l *Loop) At(t time.Time, fn func()) { l.pushFn(l.clamp(int64(t.Sub(l.epoch))), fn) }

// After runs fn d from now.
func (l *Loop) After(d time.Duration, fn func()) { l.pushFn(l.clamp(l.now+int64(d)), fn) }

func (l *Loop) pushFn(at int64, fn func()) {
	var i int32
	if n := len(l.free); n > 0 {
		i = l.free[n-1]
		l.free = l.free[:n-1]
		l.fns[i] = fn
	} else {
		i = int32(len(l.fns))
		l.fns = append(l.fns, fn)
	}
	l.push(event{at: at, idx: i, kind: evFunc})
}

func (l *Loop) clamp(at int64) int64 {
	if at < l.now {
		return l.now
	}
	return at
}

// Step runs the next event; false when none is left.
func (l *Loop) Step() bool {
	if len(l.q) == 0 {
		return false
	}
	ev := l.pop()
	l.now = ev.at
	switch ev.kind {
	case evFunc:
		fn := l.fns[ev.idx]
		l.fns[ev.idx] = nil
		l.free = append(l.free, ev.idx)
		fn()
	case evStepStart:
		l.startStep(l.engs[ev.idx])
	case evStepEnd:
		e := l.engs[ev.idx]
		if ev.gen != e.stepGen {
			return true // superseded by a truncated macro run
		}
		e.apply(l.now)
		e.flushEvents(l.now)
		l.startStep(e)
	}
	return true
}

func (l *Loop) startStep(e *Engine) {
	if end, ok := e.startStep(l.now); ok {
		l.push(event{at: end, idx: e.loopIdx, kind: evStepEnd, gen: e.stepGen})
	}
}

// Run runs every event.
func (l *Loop) Run() {
	for l.Step() {
	}
}

// RunUntil runs events up to and including virtual time t, then sets the
// clock to t.
func (l *Loop) RunUntil(t time.Time) {
	end := int64(t.Sub(l.epoch))
	for len(l.q) > 0 && l.q[0].at <= end {
		l.Step()
	}
	if end > l.now {
		l.now = end
	}
}

// Pending is the number of queued events.
func (l *Loop) Pending() int { return len(l.q) }

// driver for engines on this loop
type loopDriver struct{ l *Loop }

func (d loopDriver) now() int64 { return d.l.now }
func (d loopDriver) wake(e *Engine) {
	d.l.push(event{at: d.l.now, idx: e.loopIdx, kind: evStepStart})
}
func (d loopDriver) reschedule(e *Engine, end int64) {
	d.l.push(event{at: end, idx: e.loopIdx, kind: evStepEnd, gen: e.stepGen})
}
func (d loopDriver) after(ns int64, fn func()) { d.l.pushFn(d.l.now+ns, fn) }

func (l *Loop) push(ev event) {
	l.seq++
	ev.seq = l.seq
	l.q = append(l.q, ev)
	i := len(l.q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !evLess(&l.q[i], &l.q[p]) {
			break
		}
		l.q[i], l.q[p] = l.q[p], l.q[i]
		i = p
	}
}

func evLess(a, b *event) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }

func (l *Loop) pop() event {
	top := l.q[0]
	n := len(l.q) - 1
	l.q[0] = l.q[n]
	l.q[n] = event{}
	l.q = l.q[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && evLess(&l.q[c+1], &l.q[c]) {
			c++
		}
		if !evLess(&l.q[c], &l.q[i]) {
			break
		}
		l.q[i], l.q[c] = l.q[c], l.q[i]
		i = c
	}
	return top
}

// NewEngine creates an engine driven by this loop.
func (l *Loop) NewEngine(name string, p Profile, role Role) *Engine {
	e := newEngine(name, p, role, l.epoch, loopDriver{l})
	e.macroOK = true
	e.loopIdx = int32(len(l.engs))
	l.engs = append(l.engs, e)
	return e
}

// Submit queues r on e at the current virtual time.
func (e *Engine) Submit(r *Request) { e.submit(r) }

// EndpointSpec describes one simulated endpoint.
type EndpointSpec struct {
	Name    string // also the engine id; default "<role>-<i>"
	Address string // host:port it pretends to be (virtual) or listens on (real)
	Role    Role
	Profile Profile // zero value: the default profile
}

// VirtualFleet is a set of engines on one virtual clock.
type VirtualFleet struct {
	*Loop
	Endpoints []*Engine
	byName    map[string]*Engine
	addr      map[*Engine]string
}

// NewVirtualFleet builds a fleet on a fresh loop at epoch (zero = default).
func NewVirtualFleet(epoch time.Time, specs []EndpointSpec) *VirtualFleet {
	f := &VirtualFleet{Loop: NewLoop(epoch), byName: map[string]*Engine{}, addr: map[*Engine]string{}}
	for i, s := range specs {
		if s.Role == "" {
			s.Role = RoleBoth
		}
		if s.Profile.Name == "" {
			s.Profile = MustProfile(DefaultProfileName)
		}
		if s.Name == "" {
			s.Name = fmt.Sprintf("%s-%d", s.Role, i)
		}
		if s.Address == "" {
			s.Address = fmt.Sprintf("10.0.0.%d:8000", i+1)
		}
		e := f.NewEngine(s.Name, s.Profile, s.Role)
		f.Endpoints = append(f.Endpoints, e)
		f.byName[s.Name] = e
		f.addr[e] = s.Address
	}
	return f
}

// Engine returns the named endpoint (nil if unknown).
func (f *VirtualFleet) Engine(name string) *Engine { return f.byName[name] }

// Address is e's pretend host:port.
func (f *VirtualFleet) Address(e *Engine) string { return f.addr[e] }

// SubmitPD runs r disaggregated at the current virtual time: a prefill leg
// (max_tokens 1, KV held) on prefill, then — after the transfer time
// KV bytes ÷ the decode profile's bandwidth — the decode leg on decode, which
// recomputes the last prompt token and generates r.MaxTokens tokens. r's
// callbacks see the decode leg, except that Result.CachedTokens is the
// prefill leg's (as the sidecar rewrites it) and Result.Arrival is the
// original arrival. OnPrefillDone, if non-nil, sees the prefill leg.
func (f *VirtualFleet) SubmitPD(prefill, decode *Engine, r *Request, onPrefillDone func(Result)) {
	arrival := f.Now()
	leg := &Request{ID: r.ID + "/prefill", Prompt: r.Prompt, BlockHashes: r.BlockHashes, MaxTokens: 1, HoldKV: true}
	leg.OnComplete = func(lr *Request, res Result) {
		if onPrefillDone != nil {
			onPrefillDone(res)
		}
		if res.Err != nil {
			if r.OnComplete != nil {
				res.Arrival = arrival
				r.OnComplete(r, res)
			}
			return
		}
		cached := res.CachedTokens
		r.RemotePrefill = true
		r.TransferDelay = decode.Prof.TransferTime(len(r.Prompt))
		user := r.OnComplete
		r.OnComplete = func(dr *Request, dres Result) {
			dres.CachedTokens = cached
			dres.Arrival = arrival
			if user != nil {
				user(dr, dres)
			}
		}
		decode.Submit(r)
		// the pull finishes after the transfer: then the prefill KV is freed
		f.After(r.TransferDelay, func() { prefill.Release(lr) })
	}
	prefill.Submit(leg)
}
