package profiles

import (
	"sync"
	"sync/atomic"
)

// EndpointCounter counts what a plugin itself has in flight per endpoint
// (requests, encoder items). Counters live in a slice indexed by
// Endpoint.Index and are read lock-free on the scoring path; a removed
// endpoint's slot gets a fresh counter, so late releases of requests booked
// on the old endpoint cannot corrupt the count of a new endpoint that
// reuses its index.
type EndpointCounter struct {
	mu    sync.Mutex
	slots atomic.Pointer[[]*counterSlot]
}

type counterSlot struct {
	ep *Endpoint
	n  atomic.Int64
}

// NewEndpointCounter returns an empty counter.
func NewEndpointCounter() *EndpointCounter {
	c := &EndpointCounter{}
	empty := []*counterSlot{}
	c.slots.Store(&empty)
	return c
}

func (c *EndpointCounter) live(s []*counterSlot, ep *Endpoint) *counterSlot {
	if ep.Index >= 0 && ep.Index < len(s) && s[ep.Index] != nil && s[ep.Index].ep == ep {
		return s[ep.Index]
	}
	return nil
}

// slot returns the live slot of ep, creating it on first use.
func (c *EndpointCounter) slot(ep *Endpoint) *counterSlot {
	if sl := c.live(*c.slots.Load(), ep); sl != nil {
		return sl
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := *c.slots.Load()
	if sl := c.live(s, ep); sl != nil {
		return sl
	}
	ns := make([]*counterSlot, max(len(s), ep.Index+1))
	copy(ns, s)
	sl := &counterSlot{ep: ep}
	if ep.Index >= 0 {
		ns[ep.Index] = sl
	}
	c.slots.Store(&ns)
	return sl
}

// Count returns the count on ep without creating state.
func (c *EndpointCounter) Count(ep *Endpoint) int64 {
	if sl := c.live(*c.slots.Load(), ep); sl != nil {
		return sl.n.Load()
	}
	return 0
}

// Drop forgets ep (the endpoint left the pool).
func (c *EndpointCounter) Drop(ep *Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := *c.slots.Load()
	if c.live(s, ep) != nil {
		ns := append([]*counterSlot(nil), s...)
		ns[ep.Index] = nil
		c.slots.Store(&ns)
	}
}

// Book adds one to ep's count and records it in b, which it returns
// (allocated when b is nil).
func (c *EndpointCounter) Book(b *CounterBooking, ep *Endpoint) *CounterBooking {
	if b == nil {
		b = &CounterBooking{}
	}
	sl := c.slot(ep)
	sl.n.Add(1)
	b.slots = append(b.slots, sl)
	return b
}

// CounterBooking is what one request booked on an EndpointCounter.
type CounterBooking struct {
	slots    []*counterSlot
	released atomic.Bool
}

// Release gives back everything booked; it is idempotent and nil-safe.
func (b *CounterBooking) Release() {
	if b == nil || !b.released.CompareAndSwap(false, true) {
		return
	}
	for _, s := range b.slots {
		s.n.Add(-1)
	}
}
