package scrape_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/scrape"
)

// engine is a real HTTP server standing in for a model server's /metrics.
type engine struct {
	srv   *httptest.Server
	mu    sync.Mutex
	body  string
	ctype string
	code  int
	hits  atomic.Int64
	// hang makes /metrics block until the test ends.
	hang    atomic.Bool
	release chan struct{}
}

func newEngine(t testing.TB, body string) *engine {
	e := &engine{body: body, ctype: "text/plain; version=0.0.4; charset=utf-8", code: 200, release: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		if e.hang.Load() {
			select {
			case <-e.release:
			case <-r.Context().Done():
			}
			return
		}
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		e.mu.Lock()
		body, ctype, code := e.body, e.ctype, e.code
		e.mu.Unlock()
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(code)
		io.WriteString(w, body)
	}))
	t.Cleanup(e.srv.Close)
	t.Cleanup(func() { close(e.release) }) // runs first: unblock hung handlers
	return e
}

func (e *engine) set(body, ctype string, code int) {
	e.mu.Lock()
	e.body, e.ctype, e.code = body, ctype, code
	e.mu.Unlock()
}

func (e *engine) addr() string { return strings.TrimPrefix(e.srv.URL, "http://") }

func vllmExposition(t testing.TB) string {
	b, err := os.ReadFile("testdata/vllm.txt")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// start runs a scraper over the given endpoints (name → address) and stops
// it at cleanup, checking that Run returns.
func start(t *testing.T, opts scrape.Options, eps map[string]string) (*discovery.Store, *prometheus.Registry) {
	t.Helper()
	store := discovery.NewStore()
	var specs []discovery.Spec
	for n, a := range eps {
		specs = append(specs, discovery.Spec{Name: n, Address: a})
	}
	store.Update(specs)
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	if opts.Interval == 0 {
		opts.Interval = 2 * time.Millisecond
	}
	opts.Logger = quiet()
	s := scrape.New(store, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return store, reg
}

// waitFor polls cond (bounded) and fails with what it last saw.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func get(t *testing.T, store *discovery.Store, name string) *profiles.Endpoint {
	t.Helper()
	ep, ok := store.Get(name)
	if !ok {
		t.Fatalf("no endpoint %s", name)
	}
	return ep
}

func fresh(ep *profiles.Endpoint) func() bool { return func() bool { return !ep.Metrics().Stale } }

func TestScrapeVLLM(t *testing.T) {
	e := newEngine(t, vllmExposition(t))
	store, reg := start(t, scrape.Options{}, map[string]string{"d0": e.addr()})
	ep := get(t, store, "d0")
	waitFor(t, "first scrape", fresh(ep))
	m := ep.Metrics()
	if m.WaitingQueue != 3 || m.Running != 7 || m.KVUsage != 0.42 {
		t.Errorf("load: waiting=%d running=%d kv=%v", m.WaitingQueue, m.Running, m.KVUsage)
	}
	if m.BlockSize != 16 || m.NumGPUBlocks != 27000 {
		t.Errorf("cache config: block=%d blocks=%d", m.BlockSize, m.NumGPUBlocks)
	}
	if m.PrefixQueries != 1.2e6 || m.PrefixHits != 9e5 {
		t.Errorf("prefix: %v %v", m.PrefixQueries, m.PrefixHits)
	}
	// The newer of the two lora_requests_info samples wins.
	if !slices.Equal(m.RunningLoRAs, []string{"sql-lora", "chat-lora"}) || !slices.Equal(m.WaitingLoRAs, []string{"chat-lora"}) || m.MaxLoRA != 4 {
		t.Errorf("lora: running=%v waiting=%v max=%d", m.RunningLoRAs, m.WaitingLoRAs, m.MaxLoRA)
	}
	if m.UpdatedAt.IsZero() || m.Err != "" {
		t.Errorf("updated=%v err=%q", m.UpdatedAt, m.Err)
	}
	waitFor(t, "stale gauge 0", func() bool { return gauge(t, reg, "spillway_endpoint_metrics_stale", "d0") == 0 })
	if n := histCount(t, reg, "spillway_scrape_duration_seconds"); n == 0 {
		t.Error("scrape duration not observed")
	}
}

func TestScrapeSumsModelsAndOldNames(t *testing.T) {
	body := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="base"} 2
vllm:num_requests_waiting{model_name="lora-a"} 5
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="base"} 1
vllm:num_requests_running{model_name="lora-a"} 4
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="base"} 0.25
vllm:gpu_cache_usage_perc{model_name="lora-a"} 0.5
`
	e := newEngine(t, body)
	store, _ := start(t, scrape.Options{}, map[string]string{"d0": e.addr()})
	ep := get(t, store, "d0")
	waitFor(t, "scrape", fresh(ep))
	m := ep.Metrics()
	if m.WaitingQueue != 7 || m.Running != 5 {
		t.Errorf("sums: waiting=%d running=%d", m.WaitingQueue, m.Running)
	}
	// A usage fraction is not summed (it would exceed 1): the fullest wins.
	if m.KVUsage != 0.5 {
		t.Errorf("kv usage = %v, want 0.5", m.KVUsage)
	}
	if m.BlockSize != 0 || m.RunningLoRAs != nil {
		t.Errorf("absent metrics must stay zero: %+v", m)
	}
}

func TestScrapeSGLang(t *testing.T) {
	body := `# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 11.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 6.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 0.75
`
	e := newEngine(t, body)
	store, _ := start(t, scrape.Options{}, map[string]string{"s0": e.addr()})
	ep := get(t, store, "s0")
	waitFor(t, "scrape", fresh(ep))
	if m := ep.Metrics(); m.WaitingQueue != 11 || m.Running != 6 || m.KVUsage != 0.75 {
		t.Errorf("sglang: %+v", m)
	}
}

func TestScrapeOpenMetrics(t *testing.T) {
	body := `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 4.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{model_name="m"} 100.0
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{model_name="m"} 40.0
# EOF
`
	e := newEngine(t, "")
	e.set(body, "application/openmetrics-text; version=1.0.0; charset=utf-8", 200)
	store, _ := start(t, scrape.Options{}, map[string]string{"d0": e.addr()})
	ep := get(t, store, "d0")
	waitFor(t, "scrape", fresh(ep))
	if m := ep.Metrics(); m.WaitingQueue != 4 || m.Running != 2 || m.KVUsage != 0.1 || m.PrefixQueries != 100 || m.PrefixHits != 40 {
		t.Errorf("openmetrics: %+v", m)
	}
}

func TestScrapeFailureMarksStale(t *testing.T) {
	e := newEngine(t, vllmExposition(t))
	store, reg := start(t, scrape.Options{}, map[string]string{"d0": e.addr()})
	ep := get(t, store, "d0")
	waitFor(t, "first scrape", fresh(ep))
	good := ep.Metrics()

	e.set("oops", "text/plain", 500)
	waitFor(t, "stale after HTTP 500", func() bool { return ep.Metrics().Stale })
	m := ep.Metrics()
	if !strings.Contains(m.Err, "HTTP 500") || !strings.Contains(m.Err, e.addr()) {
		t.Errorf("Err = %q, want the URL and HTTP 500", m.Err)
	}
	// Old numbers stay visible but flagged, with their original time.
	if m.WaitingQueue != good.WaitingQueue || m.UpdatedAt.Before(good.UpdatedAt) {
		t.Errorf("stale metrics should keep the last numbers and their time: %+v", m)
	}
	waitFor(t, "stale gauge 1", func() bool { return gauge(t, reg, "spillway_endpoint_metrics_stale", "d0") == 1 })
	if n := counterValue(t, reg, "spillway_scrape_errors_total", "d0"); n < 1 {
		t.Errorf("errors = %v", n)
	}

	e.set(vllmExposition(t), "text/plain; version=0.0.4", 200)
	waitFor(t, "recovery", fresh(ep))
	waitFor(t, "stale gauge 0", func() bool { return gauge(t, reg, "spillway_endpoint_metrics_stale", "d0") == 0 })
}

func TestScrapeBadExpositions(t *testing.T) {
	for _, tc := range []struct{ name, body, want string }{
		{"not an engine", "# TYPE go_goroutines gauge\ngo_goroutines 12\n", "no vLLM or SGLang"},
		{"garbage", "vllm:num_requests_waiting{model_name=\"m\" 3\n", "parsing exposition"},
		{"old timestamp", "vllm:num_requests_waiting 3 1000\n", "older than the staleness limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, tc.body)
			store, _ := start(t, scrape.Options{}, map[string]string{"d0": e.addr()})
			ep := get(t, store, "d0")
			waitFor(t, "an error", func() bool { return strings.Contains(ep.Metrics().Err, tc.want) })
			if !ep.Metrics().Stale {
				t.Fatal("error without Stale")
			}
		})
	}
}

func TestScrapeHangingEndpointGoesStale(t *testing.T) {
	e := newEngine(t, vllmExposition(t))
	// The timeout is far longer than StaleAfter: staleness must not wait
	// for the hung scrape to time out.
	store, _ := start(t, scrape.Options{Timeout: time.Minute, StaleAfter: 30 * time.Millisecond}, map[string]string{"d0": e.addr()})
	ep := get(t, store, "d0")
	waitFor(t, "first scrape", fresh(ep))
	e.hang.Store(true)
	waitFor(t, "stale while hanging", func() bool { return ep.Metrics().Stale })
	if !strings.Contains(ep.Metrics().Err, "no successful scrape") {
		t.Errorf("Err = %q", ep.Metrics().Err)
	}
}

func TestScrapeFollowsStore(t *testing.T) {
	e1 := newEngine(t, vllmExposition(t))
	e2 := newEngine(t, vllmExposition(t))
	store, reg := start(t, scrape.Options{}, map[string]string{"a": e1.addr()})
	a := get(t, store, "a")
	waitFor(t, "a scraped", fresh(a))

	store.Update([]discovery.Spec{{Name: "a", Address: e1.addr()}, {Name: "b", Address: e2.addr()}})
	b := get(t, store, "b")
	waitFor(t, "added endpoint scraped", fresh(b))
	if get(t, store, "a") != a {
		t.Fatal("store replaced an unchanged endpoint")
	}

	store.Update([]discovery.Spec{{Name: "b", Address: e2.addr()}})
	waitFor(t, "removed endpoint's series dropped", func() bool { return !hasSeries(t, reg, "spillway_endpoint_metrics_stale", "a") })
	// The removed loop may finish one scrape in flight; after that it
	// must stop while b keeps being scraped.
	h1 := e1.hits.Load()
	h2 := e2.hits.Load()
	waitFor(t, "b scraped 20 more times", func() bool { return e2.hits.Load() >= h2+20 })
	if got := e1.hits.Load(); got > h1+1 {
		t.Fatalf("removed endpoint still scraped: %d → %d hits", h1, got)
	}
}

// An endpoint moved to a new address under the same name is a new endpoint
// in the store; its series must survive the old one's removal.
func TestScrapeEndpointMoved(t *testing.T) {
	e1 := newEngine(t, vllmExposition(t))
	e2 := newEngine(t, "")
	e2.set("broken", "text/plain", 500)
	store, reg := start(t, scrape.Options{}, map[string]string{"a": e1.addr()})
	waitFor(t, "a scraped", fresh(get(t, store, "a")))
	waitFor(t, "stale gauge 0", func() bool { return gauge(t, reg, "spillway_endpoint_metrics_stale", "a") == 0 })
	store.Update([]discovery.Spec{{Name: "a", Address: e2.addr()}})
	moved := get(t, store, "a")
	waitFor(t, "moved endpoint's errors counted", func() bool { return counterValue(t, reg, "spillway_scrape_errors_total", "a") >= 1 })
	waitFor(t, "stale gauge 1 for the moved endpoint", func() bool { return gauge(t, reg, "spillway_endpoint_metrics_stale", "a") == 1 })
	if !moved.Metrics().Stale {
		t.Fatal("moved endpoint not stale")
	}
}

func TestScrapeUnreachable(t *testing.T) {
	e := newEngine(t, "")
	addr := e.addr()
	e.srv.Close() // nothing listens there any more
	store, reg := start(t, scrape.Options{}, map[string]string{"gone": addr})
	ep := get(t, store, "gone")
	waitFor(t, "an error counted", func() bool { return counterValue(t, reg, "spillway_scrape_errors_total", "gone") >= 2 })
	if m := ep.Metrics(); !m.Stale || m.Err == "" {
		t.Fatalf("unreachable endpoint: %+v", m)
	}
}

func TestRunStopsAllLoops(t *testing.T) {
	before := runtime.NumGoroutine()
	var addrs = map[string]string{}
	for i := range 10 {
		addrs[fmt.Sprint("e", i)] = newEngine(t, vllmExposition(t)).addr()
	}
	store := discovery.NewStore()
	var specs []discovery.Spec
	for n, a := range addrs {
		specs = append(specs, discovery.Spec{Name: n, Address: a})
	}
	store.Update(specs)
	s := scrape.New(store, scrape.Options{Interval: 2 * time.Millisecond, Logger: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for _, ep := range store.Endpoints() {
		waitFor(t, ep.Name+" scraped", fresh(ep))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	// Scrape loops and the client's idle connections are gone; the test
	// servers' goroutines are not ours, so allow for them.
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before+10*3 })
}

func TestDefaults(t *testing.T) {
	s := scrape.New(discovery.NewStore(), scrape.Options{})
	o := s.Options()
	if o.Interval != 50*time.Millisecond || o.StaleAfter != 500*time.Millisecond || o.Timeout != o.StaleAfter {
		t.Fatalf("defaults: %+v", o)
	}
}

// Metric helpers over a real registry.

func find(t *testing.T, reg *prometheus.Registry, name, endpoint string) (found bool, gauge, counter float64, count uint64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := endpoint == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "endpoint" && l.GetValue() == endpoint {
					match = true
				}
			}
			if match {
				return true, m.GetGauge().GetValue(), m.GetCounter().GetValue(), m.GetHistogram().GetSampleCount()
			}
		}
	}
	return false, 0, 0, 0
}

func gauge(t *testing.T, reg *prometheus.Registry, name, ep string) float64 {
	ok, g, _, _ := find(t, reg, name, ep)
	if !ok {
		return -1
	}
	return g
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, ep string) float64 {
	_, _, c, _ := find(t, reg, name, ep)
	return c
}

func histCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	_, _, _, n := find(t, reg, name, "")
	return n
}

func hasSeries(t *testing.T, reg *prometheus.Registry, name, ep string) bool {
	ok, _, _, _ := find(t, reg, name, ep)
	return ok
}
