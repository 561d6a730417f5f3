// Package directortest holds test support for the front doors: a plugin
// that counts each request's lifecycle hooks, and a scheduler/director
// wired to a discovery.Store the test fills directly.
package directortest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

// CounterType is the plugin type of the lifecycle counter.
const CounterType = "test-lifecycle-counter"

// Counts are one request's hook calls.
type Counts struct {
	Dispatch, FirstChunk, PrefillDone, Finish, Fail int
	Usage                                           profiles.Usage
	Destination                                     string
}

// Counter counts lifecycle hooks per request id (x-request-id).
type Counter struct {
	profiles.Named
	mu   sync.Mutex
	byID map[string]*Counts
}

var once sync.Once

// Register registers the counter plugin type (idempotent).
func Register() {
	once.Do(func() {
		profiles.Register(CounterType, func(name string, raw json.RawMessage, _ profiles.Handle) (profiles.Plugin, error) {
			var p struct{}
			if err := profiles.DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			return &Counter{Named: profiles.NewNamed(CounterType, name), byID: map[string]*Counts{}}, nil
		})
	})
}

func (c *Counter) get(req *profiles.Request) *Counts {
	n := c.byID[req.ID]
	if n == nil {
		n = &Counts{}
		c.byID[req.ID] = n
	}
	return n
}

// OnDispatch implements profiles.DispatchHook.
func (c *Counter) OnDispatch(req *profiles.Request, res *profiles.Result) {
	c.mu.Lock()
	n := c.get(req)
	n.Dispatch++
	n.Destination = res.DestinationValue()
	c.mu.Unlock()
}

// OnFirstChunk implements profiles.FirstChunkHook.
func (c *Counter) OnFirstChunk(req *profiles.Request, _ *profiles.Result) {
	c.mu.Lock()
	c.get(req).FirstChunk++
	c.mu.Unlock()
}

// OnPrefillDone implements profiles.PrefillDoneHook.
func (c *Counter) OnPrefillDone(req *profiles.Request, _ *profiles.Result) {
	c.mu.Lock()
	c.get(req).PrefillDone++
	c.mu.Unlock()
}

// OnFinish implements profiles.FinishHook.
func (c *Counter) OnFinish(req *profiles.Request, _ *profiles.Result, u profiles.Usage) {
	c.mu.Lock()
	n := c.get(req)
	n.Finish++
	n.Usage = u
	c.mu.Unlock()
}

// OnFail implements profiles.FailHook.
func (c *Counter) OnFail(req *profiles.Request, _ *profiles.Result, _ error) {
	c.mu.Lock()
	c.get(req).Fail++
	c.mu.Unlock()
}

// Get returns a copy of the counts of a request id.
func (c *Counter) Get(id string) Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.byID[id]; n != nil {
		return *n
	}
	return Counts{}
}

// Config is a one-profile config with the counter; the picker returns up
// to fallbacks+1 endpoints, best queue first.
func Config(fallbacks int) string {
	return fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: %s
  name: counter
- type: decode-filter
- type: queue-scorer
- type: max-score-picker
  parameters:
    maxNumOfEndpoints: %d
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`, CounterType, fallbacks+1)
}

// Env is a director over a store the test controls.
type Env struct {
	Store    *discovery.Store
	Sched    *profiles.Scheduler
	Director *director.Director
	Counter  *Counter
	Registry *prometheus.Registry
}

// New builds an Env; opts.Registerer is replaced by Env.Registry.
func New(t testing.TB, fallbacks int, opts director.Options) *Env {
	t.Helper()
	Register()
	reg := prometheus.NewRegistry()
	store := discovery.NewStore()
	s, err := profiles.LoadConfigBytes("directortest", []byte(Config(fallbacks)), profiles.Options{Endpoints: store, Registerer: reg})
	if err != nil {
		t.Fatalf("building the test scheduler: %v", err)
	}
	t.Cleanup(s.Close)
	store.Subscribe(s)
	p, ok := s.Plugin("counter")
	if !ok {
		t.Fatal("counter plugin missing")
	}
	opts.Registerer = reg
	return &Env{Store: store, Sched: s, Director: director.New(s, opts), Counter: p.(*Counter), Registry: reg}
}

// SetQueue publishes a waiting-queue length for the endpoint at addr so that
// queue-scorer orders the endpoints deterministically.
func (e *Env) SetQueue(t testing.TB, addr string, waiting int) {
	t.Helper()
	ep, ok := e.Store.ByAddress(addr)
	if !ok {
		t.Fatalf("no endpoint %s", addr)
	}
	ep.SetMetrics(&profiles.Metrics{WaitingQueue: waiting})
}

// Specs returns decode endpoint specs named ep-0.. for addrs.
func Specs(addrs ...string) []discovery.Spec {
	out := make([]discovery.Spec, len(addrs))
	for i, a := range addrs {
		out[i] = discovery.Spec{Name: fmt.Sprintf("ep-%d", i), Address: a, Labels: map[string]string{profiles.RoleLabel: profiles.RoleDecode}}
	}
	return out
}
