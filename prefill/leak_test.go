package prefill_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// TestBackgroundWorkStopsWithScheduler: watchers dialling an engine that is
// not there, the bind-mode receiver and the in-flight janitor all end when
// the scheduler closes.
func TestBackgroundWorkStopsWithScheduler(t *testing.T) {
	base := runtime.NumGoroutine()
	eps := []*profiles.Endpoint{profiles.NewEndpoint(0, "e0", "127.0.0.1:1", map[string]string{prefill.KVEventsEndpointLabel: "tcp://127.0.0.1:1"})}
	s, err := profiles.LoadConfigBytes("test.yaml", []byte(`apiVersion: llm-d.ai/v1alpha1
plugins:
- type: precise-prefix-cache-producer
  name: dial
- type: precise-prefix-cache-producer
  name: bind
  parameters: {bind: "tcp://127.0.0.1:0"}
- type: inflight-load-producer
schedulingProfiles:
- name: p
  plugins: []
`), profiles.Options{Endpoints: profiles.EndpointList(eps)})
	if err != nil {
		t.Fatal(err)
	}
	s.OnEndpointAdded(eps[0])
	if _, err := s.Schedule(context.Background(), request("m", ids(1, 64))); err != nil {
		t.Fatal(err)
	}
	if runtime.NumGoroutine() <= base {
		t.Fatal("no background goroutines started")
	}
	// Let the watcher reach its dial-retry loop and the receivers block.
	time.Sleep(600 * time.Millisecond)
	s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines left (base %d):\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
