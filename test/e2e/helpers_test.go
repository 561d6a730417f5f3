package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/gateway"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/test/sim"

	// Plugins the configs name. The binary registers them in
	// cmd/spillway; the tests link them here.
	_ "github.com/spillway-llm/spillway/decode"
	_ "github.com/spillway-llm/spillway/encode"
	_ "github.com/spillway-llm/spillway/tokenproducer"
)

// timeScale keeps simulated seconds short: one wall second is 20 simulated.
const timeScale = 20

// model is the simulators' served model name.
const model = "sim-model"

var quiet = slog.New(slog.DiscardHandler)

// startFleet starts a simulator fleet closed with the test.
func startFleet(t *testing.T, cfg sim.FleetConfig) *sim.Fleet {
	t.Helper()
	if cfg.TimeScale == 0 {
		cfg.TimeScale = timeScale
	}
	cfg.Model = model
	// StartFleet's watcher goroutine only ends with its context.
	ctx, cancel := context.WithCancel(context.Background())
	f, err := sim.StartFleet(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("starting the simulator fleet: %v", err)
	}
	t.Cleanup(func() { f.Close(); cancel() })
	return f
}

// staticSource hands the store a fixed endpoint set, as a file source
// would after its first read.
type staticSource []discovery.Spec

func (s staticSource) Run(ctx context.Context, sink discovery.Sink) error {
	sink.Update(s)
	<-ctx.Done()
	return nil
}

// picker is a running director stack (discovery, scraping, scheduler).
type picker struct {
	*director.Stack
}

// startPicker runs director.NewStack with the config text over specs until
// the test ends; scrape is the engine-metrics interval (0: 25ms).
func startPicker(t *testing.T, config string, specs []discovery.Spec, scrape time.Duration) *picker {
	t.Helper()
	if scrape == 0 {
		scrape = 25 * time.Millisecond
	}
	path := filepath.Join(t.TempDir(), "picker.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := director.NewStack(ctx, director.StackOptions{ConfigPath: path, Source: staticSource(specs), ScrapeInterval: scrape, Logger: quiet})
	if err != nil {
		cancel()
		t.Fatalf("director.NewStack: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stack Run: %v", err)
		}
		st.Close()
	})
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := st.Store.WaitSynced(wctx); err != nil {
		t.Fatalf("waiting for endpoints: %v", err)
	}
	return &picker{st}
}

// endpoint returns the store's endpoint at address.
func (p *picker) endpoint(t *testing.T, address string) *profiles.Endpoint {
	t.Helper()
	for _, e := range p.Store.Endpoints() {
		if e.Address == address {
			return e
		}
	}
	t.Fatalf("no endpoint at %s in the store", address)
	return nil
}

// waitScraped waits until every endpoint has fresh engine metrics, so that
// no filter drops an endpoint for having none yet.
func (p *picker) waitScraped(t *testing.T) {
	t.Helper()
	waitFor(t, 5*time.Second, "engine metrics of every endpoint", func() bool {
		for _, e := range p.Store.Endpoints() {
			m := e.Metrics()
			if m == nil || m.Stale {
				return false
			}
		}
		return true
	})
}

// loads describes every endpoint's in-flight booking.
func (p *picker) loads() (string, bool) {
	var b strings.Builder
	zero := true
	for _, e := range p.Store.Endpoints() {
		r, tok := prefill.LoadOf(e)
		if r != 0 || tok != 0 {
			zero = false
		}
		fmt.Fprintf(&b, "%s: %d requests, %d tokens; ", e.Name, r, tok)
	}
	return b.String(), zero
}

// waitUnloaded asserts that every endpoint's in-flight counters return to
// zero. The release runs when the front door sees the end of the response,
// which may be a moment after the client read its last byte.
func (p *picker) waitUnloaded(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		desc, zero := p.loads()
		if zero {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in-flight load not released: %s", desc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metric sums the samples of a family on the picker's registry whose
// labels include want.
func (p *picker) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	fams, err := p.Registry.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// serve runs h on a loopback listener until the test ends; it returns the
// address.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	})
	return ln.Addr().String()
}

// startSidecar serves a kvtransfer sidecar in front of the decoder and
// returns its address. legs is the allow-list (prefill and encode
// endpoints).
func startSidecar(t *testing.T, decoder string, legs []string, o kvtransfer.Options) string {
	t.Helper()
	al, err := kvtransfer.NewAllowlist(legs...)
	if err != nil {
		t.Fatalf("allow-list: %v", err)
	}
	o.Decoder, o.Allow = "http://"+decoder, al
	if o.Logger == nil {
		o.Logger = quiet
	}
	sc, err := kvtransfer.New(o)
	if err != nil {
		t.Fatalf("kvtransfer.New: %v", err)
	}
	addr := serve(t, sc)
	t.Cleanup(sc.Close)
	return addr
}

// disaggFleet is a disaggregated simulator fleet with a sidecar in front
// of every decode endpoint, as deployed: the picker sees the sidecars'
// addresses as the decode endpoints.
type disaggFleet struct {
	*sim.Fleet
	specs    []discovery.Spec
	sidecar  map[string]*sim.FleetEndpoint // sidecar address → its decoder
	legAddrs []string
}

func startDisagg(t *testing.T, cfg sim.FleetConfig, so kvtransfer.Options) *disaggFleet {
	t.Helper()
	f := startFleet(t, cfg)
	d := &disaggFleet{Fleet: f, sidecar: map[string]*sim.FleetEndpoint{}}
	for _, e := range f.Endpoints {
		if e.Role == sim.RolePrefill || e.Role == sim.RoleEncode {
			d.legAddrs = append(d.legAddrs, e.Address)
		}
	}
	for _, e := range f.Endpoints {
		addr := e.Address
		if e.Role == sim.RoleDecode {
			addr = startSidecar(t, e.Address, d.legAddrs, so)
			d.sidecar[addr] = e
		}
		labels := map[string]string{profiles.RoleLabel: string(e.Role)}
		if e.KVEventsAddr() != "" {
			// The engine publishes behind the sidecar's address.
			labels[prefill.KVEventsEndpointLabel] = "tcp://" + e.KVEventsAddr()
			labels[prefill.KVReplayEndpointLabel] = "tcp://" + e.KVReplayAddr()
		}
		d.specs = append(d.specs, discovery.Spec{Name: e.Name, Address: addr, Labels: labels})
	}
	return d
}

// readConfig reads a shipped picker config, relative to this package.
func readConfig(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(rel))
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	return string(b)
}

// withPlugin inserts a plugin definition (YAML list item, two-space
// indented like the shipped configs) at the top of a config's plugins.
func withPlugin(t *testing.T, config, item string) string {
	t.Helper()
	const key = "\nplugins:\n"
	i := strings.Index(config, key)
	if i < 0 {
		t.Fatalf("config has no top-level plugins list")
	}
	return config[:i+len(key)] + item + config[i+len(key):]
}

var client = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableCompression: true}}

// post sends a JSON body and returns the response with its whole body.
func post(t *testing.T, url, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	resp, out, err := tryPost(url, body, hdr)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

// tryPost is post for goroutines other than the test's.
func tryPost(url, body string, hdr map[string]string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the response of %s: %w", url, err)
	}
	return resp, out, nil
}

// usage is the part of an OpenAI usage object the tests check.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	Details          *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *usage) cached() int {
	if u == nil || u.Details == nil || u.Details.CachedTokens == nil {
		return -1
	}
	return *u.Details.CachedTokens
}

// parseSSE validates a chat-completions event stream: every event is a
// `data:` line holding a chat.completion.chunk JSON object, the stream
// ends with `data: [DONE]`, and exactly one chunk carries usage. It returns
// the text and the usage.
func parseSSE(t *testing.T, body []byte) (string, *usage) {
	t.Helper()
	var text strings.Builder
	var u *usage
	done := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %q", line)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var ch struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("SSE event is not JSON: %v: %q", err, data)
		}
		if ch.Object != "chat.completion.chunk" {
			t.Fatalf("SSE event object %q, want chat.completion.chunk", ch.Object)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
		}
		if ch.Usage != nil {
			if u != nil {
				t.Fatalf("two usage chunks")
			}
			u = ch.Usage
		}
	}
	if !done {
		t.Fatalf("stream did not end with data: [DONE]:\n%s", body)
	}
	if u == nil {
		t.Fatalf("no usage chunk in the stream:\n%s", body)
	}
	return text.String(), u
}

// waitFor polls cond (bounded) until it holds.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// words returns an n-word prompt unique to seed (the simulator's tokenizer
// makes one token per word).
func words(seed string, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("%s%d", seed, i)
	}
	return strings.Join(w, " ")
}

// startGateway serves spillway's HTTP gateway for the picker.
func startGateway(t *testing.T, p *picker) string {
	t.Helper()
	return "http://" + serve(t, gateway.New(p.Director, gateway.Options{Logger: quiet}))
}
