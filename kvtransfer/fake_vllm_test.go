package kvtransfer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// leg is one request a fake vLLM server received.
type leg struct {
	Path   string
	Header http.Header
	Body   map[string]any
	Raw    []byte
}

// fakeVLLM is a real HTTP server on 127.0.0.1 playing a vLLM role. It
// records every request and counts handlers still running, so tests can
// assert that no leg is left behind.
type fakeVLLM struct {
	t        *testing.T
	srv      *httptest.Server
	mu       sync.Mutex
	legs     []leg
	inflight atomic.Int64
	handle   func(w http.ResponseWriter, r *http.Request, l leg)
}

func newFake(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, l leg)) *fakeVLLM {
	t.Helper()
	f := &fakeVLLM{t: t, handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.inflight.Add(1)
		defer f.inflight.Add(-1)
		raw, _ := io.ReadAll(r.Body)
		l := leg{Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
		_ = json.Unmarshal(raw, &l.Body)
		f.mu.Lock()
		f.legs = append(f.legs, l)
		f.mu.Unlock()
		f.handle(w, r, l)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeVLLM) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func (f *fakeVLLM) got() []leg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]leg(nil), f.legs...)
}

// waitIdle waits (bounded) until no handler of the fake is running.
func (f *fakeVLLM) waitIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.inflight.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers of fake %s still running: a leg was left behind", f.inflight.Load(), f.addr())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// prefillKV is what the fake prefiller returns (protocols.md §3.2).
var prefillKV = map[string]any{
	"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "engine-p1",
	"remote_block_ids": []any{1.0, 2.0, 3.0}, "remote_request_id": "req-p1",
	"remote_host": "10.0.0.5", "remote_port": 5600.0, "tp_size": 1.0,
}

const prefillCached = 48

func usageFor(path string, cached int) map[string]any {
	if path == PathResponses {
		return map[string]any{"input_tokens": 100, "output_tokens": 1, "total_tokens": 101,
			"input_tokens_details": map[string]any{"cached_tokens": cached}}
	}
	return map[string]any{"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101,
		"prompt_tokens_details": map[string]any{"cached_tokens": cached}}
}

// okPrefill answers like a vLLM prefiller with kv_transfer_params.
func okPrefill(w http.ResponseWriter, r *http.Request, l leg) {
	writeJSON(w, 200, map[string]any{"id": "p", "object": "x", "usage": usageFor(r.URL.Path, prefillCached), "kv_transfer_params": prefillKV})
}

// ecFor is the fake encoder's ec_transfer_params for one item.
func ecFor(url string) map[string]any {
	return map[string]any{"mm-" + url: map[string]any{"peer_host": "10.0.0.9", "peer_port": 7000.0, "size_bytes": 1234.0, "nixl_agent_metadata_b64": "QUJD"}}
}

func okEncoder(w http.ResponseWriter, r *http.Request, l leg) {
	msgs, _ := l.Body["messages"].([]any)
	url := ""
	if len(msgs) == 1 {
		c := msgs[0].(map[string]any)["content"].([]any)
		if iu, ok := c[0].(map[string]any)["image_url"].(map[string]any); ok {
			url, _ = iu["url"].(string)
		}
	}
	writeJSON(w, 200, map[string]any{"id": "e", "ec_transfer_params": ecFor(url)})
}

// decodeStreamEvents is what the fake decoder streams for a path.
func decodeStreamEvents(path string) []string {
	if path == PathResponses {
		u, _ := json.Marshal(usageFor(path, 100))
		return []string{
			"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\",\"usage\":null}}\n\n",
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r1\",\"usage\":" + string(u) + "}}\n\n",
		}
	}
	u, _ := json.Marshal(usageFor(path, 100))
	return []string{
		"data: {\"id\":\"d1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
		"data: {\"id\":\"d1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"}}],\"usage\":null}\n\n",
		"data: {\"id\":\"d1\",\"choices\":[],\"usage\":" + string(u) + "}\n\n",
		"data: [DONE]\n\n",
	}
}

// okDecode answers like the local vLLM decoder, streaming when asked.
func okDecode(w http.ResponseWriter, r *http.Request, l leg) {
	if s, _ := l.Body["stream"].(bool); s {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for _, ev := range decodeStreamEvents(r.URL.Path) {
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
		return
	}
	writeJSON(w, 200, map[string]any{"id": "d", "object": "x", "usage": usageFor(r.URL.Path, 100)})
}

// rig is a sidecar in front of fake decoder, prefiller and encoders.
type rig struct {
	sc       *Sidecar
	front    *httptest.Server
	decoder  *fakeVLLM
	prefill  *fakeVLLM
	encoders []*fakeVLLM
	logs     *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

type rigOpts struct {
	decode, prefill, encode func(w http.ResponseWriter, r *http.Request, l leg)
	encoders                int
	opts                    Options
	extraAllow              []string
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	checkGoroutines(t)
	if o.decode == nil {
		o.decode = okDecode
	}
	if o.prefill == nil {
		o.prefill = okPrefill
	}
	if o.encode == nil {
		o.encode = okEncoder
	}
	r := &rig{decoder: newFake(t, o.decode), prefill: newFake(t, o.prefill), logs: &syncBuffer{}}
	allow := []string{r.prefill.addr()}
	for range o.encoders {
		e := newFake(t, o.encode)
		r.encoders = append(r.encoders, e)
		allow = append(allow, e.addr())
	}
	al, err := NewAllowlist(append(allow, o.extraAllow...)...)
	if err != nil {
		t.Fatal(err)
	}
	opts := o.opts
	opts.Decoder = r.decoder.srv.URL
	opts.Allow = al
	opts.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	if opts.Backoff == 0 {
		opts.Backoff = time.Millisecond
	}
	sc, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.sc = sc
	r.front = httptest.NewServer(sc)
	t.Cleanup(func() { r.front.Close(); sc.Close() })
	return r
}

func (r *rig) encoderList() string {
	var a []string
	for _, e := range r.encoders {
		a = append(a, e.addr())
	}
	return strings.Join(a, ",")
}

// send posts body to the sidecar with routing headers.
func (r *rig) send(t *testing.T, ctx context.Context, path, body string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.front.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("sending to sidecar: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// checkGoroutines fails the test if goroutines started during it are still
// running after its servers closed (bounded wait: connections wind down
// asynchronously).
func checkGoroutines(t *testing.T) {
	t.Helper()
	http.DefaultClient.CloseIdleConnections()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		// Cleanups run last-in first-out: this one runs after the servers
		// registered later have closed.
		http.DefaultClient.CloseIdleConnections()
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				n := runtime.Stack(buf, true)
				t.Errorf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:n])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func mustJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad JSON %s: %v", s, err)
	}
	return m
}

func jsonEq(t *testing.T, what string, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, g, w)
	}
}
