// Package discovery keeps the set of model-server endpoints the picker may
// route to, fed by a Source (a static file, Kubernetes).
package discovery

import (
	"context"
	"maps"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/spillway-llm/spillway/profiles"
)

// Spec describes one endpoint as a source sees it.
type Spec struct {
	Name    string            `json:"name"`
	Address string            `json:"address"` // host:port
	Labels  map[string]string `json:"labels,omitempty"`
}

// Sink receives the complete desired endpoint set each time it changes.
type Sink interface {
	Update(specs []Spec)
}

// Source discovers endpoints. Run blocks until ctx is done or the source
// fails, calling sink.Update with the full set after every change (the
// first call marks the source synced).
type Source interface {
	Run(ctx context.Context, sink Sink) error
}

// Listener is told about endpoint arrivals and departures; the scheduler
// implements it to let producers drop per-endpoint state.
type Listener interface {
	OnEndpointAdded(ep *profiles.Endpoint)
	OnEndpointRemoved(ep *profiles.Endpoint)
}

// Store is the live endpoint set. Reads are lock-free snapshots; updates
// diff by name so unchanged endpoints keep their identity (and so their
// in-flight and index state).
type Store struct {
	mu        sync.Mutex
	byName    map[string]*profiles.Endpoint
	free      []int // recycled endpoint indices
	nextIndex int
	listeners []Listener
	snap      atomic.Pointer[[]*profiles.Endpoint]
	synced    atomic.Bool
	syncedCh  chan struct{}
}

// NewStore returns an empty, unsynced store.
func NewStore() *Store {
	s := &Store{byName: map[string]*profiles.Endpoint{}, syncedCh: make(chan struct{})}
	empty := []*profiles.Endpoint{}
	s.snap.Store(&empty)
	return s
}

// Subscribe adds a listener. Endpoints already present are announced to it.
func (s *Store) Subscribe(l Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
	for _, e := range *s.snap.Load() {
		l.OnEndpointAdded(e)
	}
}

// Endpoints implements profiles.EndpointLister: the current endpoints sorted
// by name. The slice is shared; do not modify it.
func (s *Store) Endpoints() []*profiles.Endpoint { return *s.snap.Load() }

// Get returns an endpoint by name.
func (s *Store) Get(name string) (*profiles.Endpoint, bool) {
	for _, e := range s.Endpoints() {
		if e.Name == name {
			return e, true
		}
	}
	return nil, false
}

// ByAddress returns the endpoint serving host:port.
func (s *Store) ByAddress(addr string) (*profiles.Endpoint, bool) {
	for _, e := range s.Endpoints() {
		if e.Address == addr {
			return e, true
		}
	}
	return nil, false
}

// Synced reports whether a source has delivered its first full set.
func (s *Store) Synced() bool { return s.synced.Load() }

// WaitSynced blocks until the store is synced or ctx is done.
func (s *Store) WaitSynced(ctx context.Context) error {
	select {
	case <-s.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Update implements Sink. An endpoint whose address or labels changed is
// replaced (removed, then added), since its identity changed.
func (s *Store) Update(specs []Spec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := make(map[string]Spec, len(specs))
	for _, sp := range specs {
		want[sp.Name] = sp
	}
	var removed, added []*profiles.Endpoint
	for name, e := range s.byName {
		sp, ok := want[name]
		if ok && sp.Address == e.Address && maps.Equal(sp.Labels, e.Labels) {
			continue
		}
		delete(s.byName, name)
		s.free = append(s.free, e.Index)
		removed = append(removed, e)
	}
	for name, sp := range want {
		if _, ok := s.byName[name]; ok {
			continue
		}
		idx := s.nextIndex
		if n := len(s.free); n > 0 {
			idx, s.free = s.free[n-1], s.free[:n-1]
		} else {
			s.nextIndex++
		}
		e := profiles.NewEndpoint(idx, sp.Name, sp.Address, maps.Clone(sp.Labels))
		s.byName[name] = e
		added = append(added, e)
	}
	next := make([]*profiles.Endpoint, 0, len(s.byName))
	for _, e := range s.byName {
		next = append(next, e)
	}
	sort.Slice(next, func(i, j int) bool { return next[i].Name < next[j].Name })
	s.snap.Store(&next)
	for _, l := range s.listeners {
		for _, e := range removed {
			l.OnEndpointRemoved(e)
		}
		for _, e := range added {
			l.OnEndpointAdded(e)
		}
	}
	if !s.synced.Swap(true) {
		close(s.syncedCh)
	}
}
