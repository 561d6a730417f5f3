package discovery_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

const goodFile = `endpoints:
- name: decode-0
  address: 127.0.0.1:8200
  labels: {llm-d.ai/role: decode}
- name: prefill-0
  address: 127.0.0.1:8100
  labels: {llm-d.ai/role: prefill}
`

func TestParseEndpoints(t *testing.T) {
	specs, err := discovery.ParseEndpoints("eps.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "decode-0" || specs[0].Address != "127.0.0.1:8200" ||
		specs[0].Labels[profiles.RoleLabel] != "decode" || specs[1].Labels[profiles.RoleLabel] != "prefill" {
		t.Fatalf("unexpected specs %+v", specs)
	}
	empty, err := discovery.ParseEndpoints("eps.yaml", []byte("endpoints: []\n"))
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty list: %v %v", empty, err)
	}
}

func TestParseEndpointsErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"empty", "", "empty file"},
		{"no list", "endpoints:\n", "a list is required"},
		{"unknown top field", "endpoint: []\n", `unknown field "endpoint"`},
		{"unknown entry field", "endpoints:\n- name: a\n  adress: 1.2.3.4:80\n", `unknown field "adress"`},
		{"missing name", "endpoints:\n- address: 127.0.0.1:80\n", "endpoints[0]: name is required"},
		{"duplicate", "endpoints:\n- {name: a, address: '127.0.0.1:80'}\n- {name: a, address: '127.0.0.1:81'}\n", "endpoints[1] (a): duplicate name, also used by endpoints[0]"},
		{"no port", "endpoints:\n- {name: a, address: 127.0.0.1}\n", `endpoints[0] (a): address "127.0.0.1"`},
		{"bad port", "endpoints:\n- {name: a, address: '127.0.0.1:http'}\n", "not a number"},
		{"port range", "endpoints:\n- {name: a, address: '127.0.0.1:70000'}\n", "1..65535"},
		{"no host", "endpoints:\n- {name: a, address: ':80'}\n", "empty host"},
		{"url", "endpoints:\n- {name: a, address: 'http://x:80'}\n", "want host:port"},
		{"missing address", "endpoints:\n- {name: a}\n", "address \"\": required"},
		{"wrong type", "endpoints:\n- {name: a, address: '127.0.0.1:80', labels: [x]}\n", "eps.yaml"},
		{"not yaml", "endpoints: [\n", "eps.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := discovery.ParseEndpoints("eps.yaml", []byte(tc.doc))
			if err == nil {
				t.Fatal("accepted a bad file")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "eps.yaml") {
				t.Fatalf("error %q does not name the file and contain %q", err, tc.want)
			}
		})
	}
}

// recordingSink delivers every update on a channel.
type recordingSink struct{ ch chan []discovery.Spec }

func (r recordingSink) Update(s []discovery.Spec) { r.ch <- s }

// teeSink feeds a real store and signals after each update.
type teeSink struct {
	store *discovery.Store
	ch    chan struct{}
}

func (t teeSink) Update(s []discovery.Spec) { t.store.Update(s); t.ch <- struct{}{} }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write then rename, as editors and ConfigMap updates do, so that the
	// poller never reads a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitUpdate(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no update from the file source")
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestFileSourceReloadKeepsIdentity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeFile(t, path, goodFile)
	src := discovery.NewFileSource(path)
	src.PollInterval = 5 * time.Millisecond
	src.Logger = quietLogger()
	reg := prometheus.NewRegistry()
	src.Register(reg)
	store := discovery.NewStore()
	sink := teeSink{store: store, ch: make(chan struct{}, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	waitUpdate(t, sink.ch)
	if !store.Synced() || len(store.Endpoints()) != 2 {
		t.Fatalf("store after first load: synced=%v %v", store.Synced(), store.Endpoints())
	}
	dec0, _ := store.Get("decode-0")

	// Add an endpoint and move prefill-0: decode-0 must keep its identity.
	writeFile(t, path, goodFile+"- name: decode-1\n  address: 127.0.0.1:8201\n  labels: {llm-d.ai/role: decode}\n")
	waitUpdate(t, sink.ch)
	if got := len(store.Endpoints()); got != 3 {
		t.Fatalf("after adding: %d endpoints", got)
	}
	if d, _ := store.Get("decode-0"); d != dec0 {
		t.Fatal("unchanged endpoint decode-0 lost its identity on reload")
	}

	// A broken edit keeps the last good set and counts one error.
	writeFile(t, path, "endpoints:\n- name: decode-0\n  address: nope\n")
	deadline := time.Now().Add(10 * time.Second)
	for reloadErrors(t, reg) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("broken edit was not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := len(store.Endpoints()); got != 3 {
		t.Fatalf("broken edit changed the set: %d endpoints", got)
	}
	select {
	case <-sink.ch:
		t.Fatal("broken edit reached the sink")
	default:
	}

	// Fixing the file applies it; the same broken content is counted once.
	writeFile(t, path, goodFile)
	waitUpdate(t, sink.ch)
	if got := len(store.Endpoints()); got != 2 {
		t.Fatalf("after fix: %d endpoints", got)
	}
	if d, _ := store.Get("decode-0"); d != dec0 {
		t.Fatal("decode-0 lost its identity across a broken edit")
	}
	if n := reloadErrors(t, reg); n != 1 {
		t.Fatalf("reload errors = %v, want 1", n)
	}
}

// reloadErrors reads spillway_endpoints_reload_errors_total from reg.
func reloadErrors(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "spillway_endpoints_reload_errors_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("spillway_endpoints_reload_errors_total not registered")
	return 0
}

func TestFileSourceStartErrors(t *testing.T) {
	dir := t.TempDir()
	src := discovery.NewFileSource(filepath.Join(dir, "missing.yaml"))
	sink := recordingSink{ch: make(chan []discovery.Spec, 1)}
	if err := src.Run(context.Background(), sink); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "endpoints:\n- {name: a, address: x}\n")
	err := discovery.NewFileSource(bad).Run(context.Background(), sink)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), "endpoints[0] (a)") {
		t.Fatalf("bad file: %v", err)
	}
	if len(sink.ch) != 0 {
		t.Fatal("a bad file at start reached the sink")
	}
}

func TestFileSourceSurvivesDeletedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeFile(t, path, goodFile)
	src := discovery.NewFileSource(path)
	src.PollInterval = 5 * time.Millisecond
	src.Logger = quietLogger()
	reg := prometheus.NewRegistry()
	src.Register(reg)
	sink := recordingSink{ch: make(chan []discovery.Spec, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = src.Run(ctx, sink) }()
	defer func() { cancel(); wg.Wait() }()
	<-sink.ch
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for reloadErrors(t, reg) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("deleted file was not counted as a reload error")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(sink.ch) != 0 {
		t.Fatal("deleting the file sent an update")
	}
	// The file coming back with new content is applied: the read error did
	// not stop the poller.
	writeFile(t, path, "endpoints: []\n")
	select {
	case s := <-sink.ch:
		if len(s) != 0 {
			t.Fatalf("got %v", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("restored file not applied")
	}
}
