package profiles

import (
	"slices"
	"sync"
	"sync/atomic"
)

// ProfileSet remembers the profiles a plugin has run in (from
// CycleState.Profile), so that its dispatch hook books the endpoints those
// profiles picked without the config naming them. Reads are lock-free; the
// set only grows, and only the first time a profile is seen. The zero value
// is ready to use.
type ProfileSet struct {
	mu    sync.Mutex
	names atomic.Pointer[[]string]
}

// Note records a profile name.
func (p *ProfileSet) Note(name string) {
	if slices.Contains(p.Names(), name) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cur := p.Names()
	if !slices.Contains(cur, name) {
		next := append(slices.Clone(cur), name)
		p.names.Store(&next)
	}
}

// Names returns the recorded profiles; the slice must not be modified.
func (p *ProfileSet) Names() []string {
	if n := p.names.Load(); n != nil {
		return *n
	}
	return nil
}
