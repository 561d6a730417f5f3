package kvtransfer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/spillway-llm/spillway/discovery"
)

// Allowlist is the sidecar's SSRF guard: the only addresses it will dial.
// Entries are "host:port", compared after lower-casing the host. Static
// entries come from flags; the dynamic set follows an endpoint source (it
// implements discovery.Sink, so the picker's own endpoints file can feed
// it).
type Allowlist struct {
	mu      sync.RWMutex
	static  map[string]bool
	dynamic map[string]bool
}

// Allower decides which addresses the sidecar may dial. *Allowlist is the
// usual one; AllowFunc adapts any other source (e.g. a discovery.Store's
// ByAddress lookup).
type Allower interface {
	Allowed(hostport string) bool
}

// AllowFunc adapts a function to Allower.
type AllowFunc func(hostport string) bool

// Allowed implements Allower.
func (f AllowFunc) Allowed(hostport string) bool { return f(hostport) }

// ErrForbiddenHost is returned for an address outside the allow-list.
var ErrForbiddenHost = errors.New("address is not in the sidecar's allow-list")

// NewAllowlist builds an allow-list from host:port entries.
func NewAllowlist(addrs ...string) (*Allowlist, error) {
	a := &Allowlist{static: map[string]bool{}, dynamic: map[string]bool{}}
	for _, s := range addrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		c, err := canonical(s)
		if err != nil {
			return nil, fmt.Errorf("allow-list entry %q: %w", s, err)
		}
		a.static[c] = true
	}
	return a, nil
}

func canonical(hostport string) (string, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", err
	}
	if host == "" || port == "" {
		return "", fmt.Errorf("want host:port")
	}
	return net.JoinHostPort(strings.ToLower(host), port), nil
}

// Allowed reports whether hostport may be dialed.
func (a *Allowlist) Allowed(hostport string) bool {
	c, err := canonical(hostport)
	if err != nil {
		return false
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.static[c] || a.dynamic[c]
}

// Add allows more addresses.
func (a *Allowlist) Add(addrs ...string) error {
	for _, s := range addrs {
		c, err := canonical(s)
		if err != nil {
			return fmt.Errorf("allow-list entry %q: %w", s, err)
		}
		a.mu.Lock()
		a.static[c] = true
		a.mu.Unlock()
	}
	return nil
}

// Update implements discovery.Sink: the dynamic part becomes exactly the
// source's endpoints.
func (a *Allowlist) Update(specs []discovery.Spec) {
	next := make(map[string]bool, len(specs))
	for _, s := range specs {
		if c, err := canonical(s.Address); err == nil {
			next[c] = true
		}
	}
	a.mu.Lock()
	a.dynamic = next
	a.mu.Unlock()
}

// Len returns the number of allowed addresses.
func (a *Allowlist) Len() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.static) + len(a.dynamic)
}

// guardedDialer refuses, before any connection attempt, every address the
// check rejects. It is the second line of defence: the handler checks the
// routing headers first and answers 403.
func guardedDialer(d *net.Dialer, allowed func(string) bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !allowed(addr) {
			return nil, fmt.Errorf("dial %s: %w", addr, ErrForbiddenHost)
		}
		return d.DialContext(ctx, network, addr)
	}
}
