package tokenproducer

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

// tokenizeServer is a real HTTP server with vLLM's /tokenize shape: one
// token per whitespace-separated word of every message, plus 2 per message
// for the template.
type tokenizeServer struct {
	*httptest.Server
	calls atomic.Int32
	last  atomic.Value // tokenizeRequest
}

func newTokenizeServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request) bool) *tokenizeServer {
	ts := &tokenizeServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.calls.Add(1)
		if h != nil && !h(w, r) {
			return
		}
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var tr tokenizeRequest
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		ts.last.Store(tr)
		var ids []uint32
		for _, m := range tr.Messages {
			ids = append(ids, 1, 2)
			for _, w := range strings.Fields(m.Content) {
				ids = append(ids, uint32(len(w)))
			}
		}
		if tr.Prompt != nil {
			for _, w := range strings.Fields(*tr.Prompt) {
				ids = append(ids, uint32(len(w)))
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(ids), "tokens": ids, "max_model_len": 32768})
	}))
	t.Cleanup(ts.Close)
	return ts
}

func TestModelServerBackend(t *testing.T) {
	ts := newTokenizeServer(t, nil)
	reg := prometheus.NewRegistry()
	c := newCounter(t, `{"backend":"model-server","modelServer":{"url":"`+ts.URL+`","timeout":"2s"}}`, reg)
	req := parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", textMsg("system", "you are terse"), imageMsg("what is in this picture", pngDataURL(t, 200, 300))))
	tc, _, err := c.Count(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 2+3 and 2+5 tokens from the server, + 2 image wrappers; 70 image tokens.
	if tc.Backend != BackendModelServer || tc.Text != 14 || tc.Image != 70 {
		t.Fatalf("got %+v", tc)
	}
	// Real ids kept, then the image's 70 hash ids.
	if len(tc.IDs) != 12+70 || tc.IDs[0] != 1 || tc.IDs[2] != 3 {
		t.Fatalf("ids %v", tc.IDs[:12])
	}
	last := ts.last.Load().(tokenizeRequest)
	if last.Model != "Qwen/Qwen3-VL-8B" || len(last.Messages) != 2 || last.Messages[1].Content != "what is in this picture" || last.AddGenerationPrompt == nil || !*last.AddGenerationPrompt {
		t.Fatalf("request sent: %+v", last)
	}
	// Completions prompt shape.
	creq, err := profiles.ParseRequest(profiles.PathCompletions, map[string]string{}, []byte(`{"model":"m","prompt":"one two three"}`))
	if err != nil {
		t.Fatal(err)
	}
	tc, _, _ = c.Count(context.Background(), creq, nil)
	if tc.Text != 3 || ts.last.Load().(tokenizeRequest).Prompt == nil {
		t.Fatalf("prompt: %+v", tc)
	}
	if got := counterValue(t, reg, "spillway_token_backend_fallback_total", nil); got != 0 {
		t.Fatalf("fallbacks %v", got)
	}
}

func TestModelServerEndpointsRoundRobin(t *testing.T) {
	a, b := newTokenizeServer(t, nil), newTokenizeServer(t, nil)
	eps := []*profiles.Endpoint{
		profiles.NewEndpoint(0, "a", strings.TrimPrefix(a.URL, "http://"), nil),
		profiles.NewEndpoint(1, "b", strings.TrimPrefix(b.URL, "http://"), nil),
	}
	c := newCounter(t, `{"backend":"model-server"}`, nil)
	for range 4 {
		tc, _, err := c.Count(context.Background(), parse(t, chatBody(t, "m", textMsg("user", "a b c"))), eps)
		if err != nil || tc.Backend != BackendModelServer || tc.Text != 5 {
			t.Fatalf("%+v %v", tc, err)
		}
	}
	if a.calls.Load() != 2 || b.calls.Load() != 2 {
		t.Fatalf("calls a=%d b=%d, want 2 each", a.calls.Load(), b.calls.Load())
	}
}

func TestModelServerFallbacks(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(release) }) }
	t.Cleanup(done)
	slow := newTokenizeServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return false
	})
	broken := newTokenizeServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "no tokenizer", http.StatusNotFound)
		return false
	})
	garbage := newTokenizeServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		_, _ = w.Write([]byte(`{"tokens": "nope"}`))
		return false
	})
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()

	body := chatBody(t, "m", textMsg("user", strings.Repeat("x", 40)))
	want := (4 + 40) / 4 // the estimate
	for _, c := range []struct {
		name, url, reason string
	}{
		{"timeout", slow.URL, "timeout"},
		{"status", broken.URL, "status"},
		{"bad-response", garbage.URL, "bad_response"},
		{"refused", closed, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			ctr := newCounter(t, `{"backend":"model-server","modelServer":{"url":"`+c.url+`","timeout":"50ms"}}`, reg)
			tc, _, err := ctr.Count(context.Background(), parse(t, body), nil)
			if err != nil || tc.Backend != BackendEstimate || tc.Text != want {
				t.Fatalf("got %+v %v, want the estimate %d", tc, err, want)
			}
			if got := counterValue(t, reg, "spillway_token_backend_fallback_total", map[string]string{"backend": "model-server", "reason": c.reason}); got != 1 {
				t.Fatalf("fallback_total{%s} = %v", c.reason, got)
			}
		})
	}
	// No url and no endpoints.
	reg := prometheus.NewRegistry()
	ctr := newCounter(t, `{"backend":"model-server"}`, reg)
	if tc, _, _ := ctr.Count(context.Background(), parse(t, body), nil); tc.Backend != BackendEstimate {
		t.Fatalf("no endpoint: %+v", tc)
	}
	if got := counterValue(t, reg, "spillway_token_backend_fallback_total", map[string]string{"reason": "no_endpoint"}); got != 1 {
		t.Fatalf("no_endpoint fallbacks %v", got)
	}
	done()
}

func TestModelServerConcurrencyBound(t *testing.T) {
	entered := make(chan struct{}, 8)
	release := make(chan struct{})
	ts := newTokenizeServer(t, func(w http.ResponseWriter, r *http.Request) bool {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return false
		}
		return true
	})
	reg := prometheus.NewRegistry()
	c := newCounter(t, `{"backend":"model-server","modelServer":{"url":"`+ts.URL+`","timeout":"30s","maxConcurrency":2}}`, reg)
	body := chatBody(t, "m", textMsg("user", "a b"))
	var wg sync.WaitGroup
	results := make(chan string, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc, _, _ := c.Count(context.Background(), parse(t, body), nil)
			results <- tc.Backend
		}()
	}
	<-entered
	<-entered
	// Both slots are taken: a third call falls back at once, without waiting.
	tc, _, err := c.Count(context.Background(), parse(t, body), nil)
	if err != nil || tc.Backend != BackendEstimate {
		t.Fatalf("third call: %+v %v", tc, err)
	}
	if got := counterValue(t, reg, "spillway_token_backend_fallback_total", map[string]string{"reason": "busy"}); got != 1 {
		t.Fatalf("busy fallbacks %v", got)
	}
	close(release)
	wg.Wait()
	close(results)
	for b := range results {
		if b != BackendModelServer {
			t.Fatalf("slot holders got %s", b)
		}
	}
	_ = time.Second
}
