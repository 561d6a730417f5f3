package e2e

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/test/sim"
)

// freePort reserves a loopback port number (the listener is closed, so a
// later bind may race another process; on a test machine it does not).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestPreciseBindModeEnginesDialIn: the precise producer's bind mode (one
// SUB, engines dial in with --kv-events-dial) attributes each engine's
// batches by its topic, kv@<host:port>@<model>, to the endpoint at that
// address.
func TestPreciseBindModeEnginesDialIn(t *testing.T) {
	bind := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	addrs := []string{fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	var specs []discovery.Spec
	for i, a := range addrs {
		specs = append(specs, discovery.Spec{Name: fmt.Sprintf("engine-%d", i), Address: a, Labels: map[string]string{profiles.RoleLabel: "both"}})
	}
	cfg := fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters: {backend: model-server, modelServer: {timeout: 5s}}
- type: precise-prefix-cache-producer
  parameters: {bind: %q}
- type: decode-filter
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
`, bind)
	p := startPicker(t, cfg, specs, 0)
	var engines []*sim.Server
	for i, a := range addrs {
		s, err := sim.NewServer(sim.ServerConfig{Name: specs[i].Name, Model: model, Role: sim.RoleBoth, TimeScale: timeScale, Listen: a,
			KVEvents: &sim.KVEventsConfig{Endpoint: bind, Dial: true}})
		if err != nil {
			t.Fatalf("engine on %s: %v", a, err)
		}
		t.Cleanup(func() { s.Close() })
		engines = append(engines, s)
	}
	eps := []*profiles.Endpoint{p.endpoint(t, addrs[0]), p.endpoint(t, addrs[1])}

	schedule := func(body string) *profiles.Request {
		t.Helper()
		req, err := profiles.ParseRequest("/v1/chat/completions", nil, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.Scheduler.Schedule(ctx, req); err != nil {
			t.Fatalf("Schedule: %v", err)
		}
		return req
	}
	// Until an engine's dialled PUB has our subscription, its batches are
	// dropped: each try is a new prompt, so that it publishes afresh.
	for i, e := range engines {
		try := 0
		waitFor(t, 10*time.Second, "engine "+e.Name()+"'s batches attributed", func() bool {
			try++
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":2}`, model, words(fmt.Sprintf("bind%d-%d-", i, try), 64))
			post(t, e.URL()+"/v1/chat/completions", body, nil)
			req := schedule(body)
			mine, total, _ := prefill.MatchOf(req, eps[i])
			other, _, _ := prefill.MatchOf(req, eps[1-i])
			if other != 0 {
				t.Fatalf("engine %s's blocks attributed to %s (%d blocks)", e.Name(), eps[1-i].Name, other)
			}
			return total == 66/16 && mine == total
		})
	}
	if n := p.metric(t, "spillway_kv_event_errors_total", map[string]string{"reason": "unknown_topic"}); n != 0 {
		t.Errorf("%v batches with an unknown topic", n)
	}
}
