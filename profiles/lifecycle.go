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

// FirstChunk marks the first response chunk (end of prefill).
func (t *Tracker) FirstChunk() {
	t.mu.Lock()
	if t.done || t.first {
		t.mu.Unlock()
		return
	}
	t.first = true
	t.firstAt = t.s.opts.Clock.Now()
	t.mu.Unlock()
	for _, h := range t.s.first {
		h.OnFirstChunk(t.req, t.res)
	}
}

// PrefillDone marks the end of the remote prefill leg of a P/D request.
func (t *Tracker) PrefillDone() {
	t.mu.Lock()
	if t.done || t.prefill {
		t.mu.Unlock()
		return
	}
	t.prefill = true
	t.mu.Unlock()
	for _, h := range t.s.prefill {
		h.OnPrefillDone(t.req, t.res)
	}
}

// Finish marks the request complete with the usage the response reported.
// Hooks for earlier stages that were never observed fire first, so that
// everything booked is released.
func (t *Tracker) Finish(u Usage) {
	t.PrefillDone()
	t.FirstChunk()
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return
	}
	t.done = true
	if u.TTFT == 0 && !t.firstAt.IsZero() {
		u.TTFT = t.firstAt.Sub(t.dispatched)
	}
	t.mu.Unlock()
	for _, h := range t.s.finish {
		h.OnFinish(t.req, t.res, u)
	}
}

// Fail marks the request failed or cancelled; hooks release everything the
// request booked.
func (t *Tracker) Fail(err error) {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return
	}
	t.done = true
	t.mu.Unlock()
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
