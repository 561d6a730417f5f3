package profiles

import (
	"sync"
	"time"
)

// Tracker carries one dispatched request through its lifecycle. Its methods
// are safe for concurrent use and idempotent: each hook fires at most once,
// and once the request is finished or failed nothing fires again.
type Tracker struct {
	s   *Scheduler
	req *Request
	res *Result

	mu         sync.Mutex
	dispatched time.Time
	firstAt    time.Time
	first      bool
	prefill    bool
	done       bool
}

// Dispatch books the request on its chosen endpoints and returns its
// tracker. Call it once the request is about to be sent.
func (s *Scheduler) Dispatch(req *Request, res *Result) *Tracker {
	t := &Tracker{s: s, req: req, res: res, dispatched: s.opts.Clock.Now()}
	for _, h := range s.dispatch {
		h.OnDispatch(req, res)
	}
	return t
}

// Request returns the tracked request.
func (t *Tracker) Request() *Request { return t.req }

// Result returns the scheduling result.
func (t *Tracker) Result() *Result { return t.res }

// Hooks run under the tracker's lock, so that the hooks of one request
// never overlap (a release at the first chunk cannot race the release at
// the end). Hooks must not call back into the Tracker.

// FirstChunk marks the first response chunk (end of prefill).
func (t *Tracker) FirstChunk() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.firstChunkLocked()
}

func (t *Tracker) firstChunkLocked() {
	if t.done || t.first {
		return
	}
	t.first = true
	t.firstAt = t.s.opts.Clock.Now()
	for _, h := range t.s.first {
		h.OnFirstChunk(t.req, t.res)
	}
}

// PrefillDone marks the end of the remote prefill leg of a P/D request.
func (t *Tracker) PrefillDone() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prefillDoneLocked()
}

func (t *Tracker) prefillDoneLocked() {
	if t.done || t.prefill {
		return
	}
	t.prefill = true
	for _, h := range t.s.prefill {
		h.OnPrefillDone(t.req, t.res)
	}
}

// Finish marks the request complete with the usage the response reported.
// Hooks for earlier stages that were never observed fire first, so that
// everything booked is released.
func (t *Tracker) Finish(u Usage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.prefillDoneLocked()
	t.firstChunkLocked()
	t.done = true
	if u.TTFT == 0 && !t.firstAt.IsZero() {
		u.TTFT = t.firstAt.Sub(t.dispatched)
	}
	for _, h := range t.s.finish {
		h.OnFinish(t.req, t.res, u)
	}
}

// Fail marks the request failed or cancelled; hooks release everything the
// request booked.
func (t *Tracker) Fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	for _, h := range t.s.fail {
		h.OnFail(t.req, t.res, err)
	}
}

// Done reports whether the request finished or failed.
func (t *Tracker) Done() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done
}

// ErrRetargeted is what FailHooks see when a booking is moved to a fallback
// endpoint: they release it, and DispatchHooks then book the new target.
var ErrRetargeted = &StatusError{Code: 502, Message: "primary endpoint unreachable; retargeted to a fallback"}

// Retarget records that the primary profile's fallback at address served
// the request instead of its first target (the connection to the primary
// failed before any byte was sent). Bookings move with it: FailHooks
// release the old ones with ErrRetargeted and DispatchHooks book the new
// target. It reports whether anything changed; after the first chunk it
// does nothing.
func (t *Tracker) Retarget(address string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || t.first {
		return false
	}
	pr := t.res.Profiles[t.res.Primary]
	if pr == nil || len(pr.Targets) == 0 || pr.Targets[0].Address == address {
		return false
	}
	idx := -1
	for i, e := range pr.Targets {
		if e.Address == address {
			idx = i
			break
		}
	}
	if idx < 0 {
		return false
	}
	for _, h := range t.s.fail {
		h.OnFail(t.req, t.res, ErrRetargeted)
	}
	// Copy the targets: the picker's slice may be shared with other views.
	targets := make([]*Endpoint, 0, len(pr.Targets)-idx)
	targets = append(targets, pr.Targets[idx:]...)
	t.res.Profiles[t.res.Primary] = &ProfileResult{Profile: pr.Profile, Targets: targets, Candidates: pr.Candidates}
	for _, h := range t.s.dispatch {
		h.OnDispatch(t.req, t.res)
	}
	return true
}
