package decode

import (
	"sync"
	"sync/atomic"

	"github.com/spillway-llm/spillway/profiles"
)

// inflight counts requests the picker itself has in flight per endpoint. The
// counters live in a slice indexed by Endpoint.Index (read lock-free on the
// scoring path); a removed endpoint's slot gets a fresh counter so that late
// releases of requests booked on the old endpoint cannot corrupt the count
// of a new endpoint that reuses its index.
type inflight struct {
	mu    sync.Mutex
	slots atomic.Pointer[[]*slot]
}

type slot struct {
	ep *profiles.Endpoint
	n  atomic.Int64
}

func newInflight() *inflight {
	c := &inflight{}
	empty := []*slot{}
	c.slots.Store(&empty)
	return c
}

// get returns the live slot of ep, creating it on first use.
func (c *inflight) get(ep *profiles.Endpoint) *slot {
	s := *c.slots.Load()
	if ep.Index >= 0 && ep.Index < len(s) && s[ep.Index] != nil && s[ep.Index].ep == ep {
		return s[ep.Index]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s = *c.slots.Load()
	if ep.Index >= 0 && ep.Index < len(s) && s[ep.Index] != nil && s[ep.Index].ep == ep {
		return s[ep.Index]
	}
	n := len(s)
	if ep.Index >= n {
		n = ep.Index + 1
	}
	ns := make([]*slot, n)
	copy(ns, s)
	sl := &slot{ep: ep}
	if ep.Index >= 0 {
		ns[ep.Index] = sl
	}
	c.slots.Store(&ns)
	return sl
}

// count returns the in-flight requests on ep without creating state.
func (c *inflight) count(ep *profiles.Endpoint) int64 {
	s := *c.slots.Load()
	if ep.Index >= 0 && ep.Index < len(s) && s[ep.Index] != nil && s[ep.Index].ep == ep {
		return s[ep.Index].n.Load()
	}
	return 0
}

// drop forgets ep's slot (the endpoint left the pool).
func (c *inflight) drop(ep *profiles.Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := *c.slots.Load()
	if ep.Index >= 0 && ep.Index < len(s) && s[ep.Index] != nil && s[ep.Index].ep == ep {
		ns := append([]*slot(nil), s...)
		ns[ep.Index] = nil
		c.slots.Store(&ns)
	}
}

// booking is what one request booked; release is idempotent.
type booking struct {
	slots    []*slot
	released atomic.Bool
}

func (b *booking) release() {
	if b == nil || !b.released.CompareAndSwap(false, true) {
		return
	}
	for _, s := range b.slots {
		s.n.Add(-1)
	}
}
