package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/director/directortest"
	"github.com/spillway-llm/spillway/gateway"
	"github.com/spillway-llm/spillway/profiles"
)

// upstream is a real HTTP engine stand-in on loopback that records what it
// received.
type upstream struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
	bodies  []string
}

func newUpstream(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.headers = append(u.headers, r.Header.Clone())
		u.bodies = append(u.bodies, string(b))
		u.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.URL, "http://") }

func (u *upstream) got() ([]http.Header, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.headers...), append([]string(nil), u.bodies...)
}

func startGateway(t *testing.T, fallbacks int) (*directortest.Env, string) {
	t.Helper()
	env := directortest.New(t, fallbacks, director.Options{})
	gw := httptest.NewServer(gateway.New(env.Director, gateway.Options{DialTimeout: 2 * time.Second}))
	t.Cleanup(gw.Close)
	return env, gw.URL
}

const streamBody = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`

func post(t *testing.T, ctx context.Context, url, id, body string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestStreamingPassThroughWithHooks(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(director.HeaderPrefillDoneMs, "3")
		w.WriteHeader(200)
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n")
		w.(http.Flusher).Flush()
		// Hold the rest until the client has seen the first event: a
		// gateway that buffered would deadlock here (bounded by the test
		// context).
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n")
	})
	env, url := startGateway(t, 0)
	env.Store.Update(directortest.Specs(up.addr()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp := post(t, ctx, url, "s1", streamBody, "X-Prefiller-Host-Port", "169.254.169.254:80", "X-Spillway-Debug", "1")
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if d := resp.Header.Get(director.HeaderDecision); !strings.Contains(d, "destination="+up.addr()) {
		t.Errorf("decision header %q", d)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "Hel") {
		t.Fatalf("first event %q, %v", line, err)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("stream tail %q", rest)
	}
	resp.Body.Close()
	hs, bodies := up.got()
	if len(hs) != 1 || bodies[0] != streamBody {
		t.Fatalf("upstream got %d requests, body %q", len(hs), bodies)
	}
	if v := hs[0].Get(director.HeaderPrefiller); v != "" {
		t.Errorf("client-forged %s=%q reached the endpoint", director.HeaderPrefiller, v)
	}
	if v := hs[0].Get(director.HeaderDestination); v != up.addr() {
		t.Errorf("upstream saw destination %q, want %q", v, up.addr())
	}
	c := waitCounts(t, env, "s1", func(c directortest.Counts) bool { return c.Finish+c.Fail > 0 })
	want := directortest.Counts{Dispatch: 1, FirstChunk: 1, PrefillDone: 1, Finish: 1,
		Usage: profiles.Usage{PromptTokens: 12, CompletionTokens: 1, CachedTokens: 8, Reported: true, TTFT: c.Usage.TTFT}, Destination: up.addr()}
	if c != want {
		t.Fatalf("hooks %+v, want %+v", c, want)
	}
}

func TestRoutingHeadersForwarded(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}`)
	})
	env := directortest.New(t, 0, director.Options{Rewriter: prefiller("127.0.0.1:7777")})
	gw := httptest.NewServer(gateway.New(env.Director, gateway.Options{}))
	defer gw.Close()
	env.Store.Update(directortest.Specs(up.addr()))
	resp := post(t, context.Background(), gw.URL, "rh", `{"model":"m","prompt":"x"}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	hs, _ := up.got()
	if len(hs) != 1 || hs[0].Get(director.HeaderPrefiller) != "127.0.0.1:7777" {
		t.Fatalf("routing header not forwarded: %v", hs)
	}
	if c := waitCounts(t, env, "rh", ended); c.Finish != 1 || c.Usage.PromptTokens != 4 {
		t.Fatalf("hooks %+v", c)
	}
}

// prefiller sets a routing header, as a P/D profile handler would.
type prefiller string

func (p prefiller) Rewrite(_ *profiles.Request, res *profiles.Result) ([]byte, bool, error) {
	if res.Headers == nil {
		res.Headers = map[string]string{}
	}
	res.Headers[director.HeaderPrefiller] = string(p)
	return nil, false, nil
}

// deadAddr returns a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func TestFallbackOnConnectionRefused(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) })
	dead := deadAddr(t)
	env, url := startGateway(t, 1)
	env.Store.Update(directortest.Specs(dead, up.addr()))
	env.SetQueue(t, dead, 0) // the dead one is the preferred target
	env.SetQueue(t, up.addr(), 5)
	resp := post(t, context.Background(), url, "fb", streamBody)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `{"ok":true}` {
		t.Fatalf("status %d body %q, want the fallback's answer", resp.StatusCode, b)
	}
	// The booking moved to the fallback: released once (Fail with
	// ErrRetargeted) and booked again (a second Dispatch) before finishing.
	if c := waitCounts(t, env, "fb", ended); c.Destination != up.addr() || c.Finish != 1 || c.Fail != 1 || c.Dispatch != 2 {
		t.Fatalf("hooks %+v", c)
	}
	// Every target refusing is a 502 in OpenAI shape, and the request fails.
	env.Store.Update(directortest.Specs(dead))
	resp = post(t, context.Background(), url, "fb2", streamBody)
	checkError(t, resp, 502)
	if c := env.Counter.Get("fb2"); c.Fail != 1 || c.Finish != 0 {
		t.Fatalf("hooks %+v", c)
	}
}

func checkError(t *testing.T, resp *http.Response, code int) {
	t.Helper()
	defer resp.Body.Close()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if resp.StatusCode != code {
		t.Fatalf("status %d, want %d", resp.StatusCode, code)
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Code != code || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("error body not in OpenAI shape: %+v (%v)", e, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("content-type %q", ct)
	}
}

func TestErrors(t *testing.T) {
	env, url := startGateway(t, 0)
	checkError(t, post(t, context.Background(), url, "e1", streamBody), 503)
	env.Store.Update(directortest.Specs("127.0.0.1:1"))
	checkError(t, post(t, context.Background(), url, "e2", `{"model":`), 400)
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	upstreamGone := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a long generation, until cancelled
		close(upstreamGone)
	})
	env, url := startGateway(t, 0)
	env.Store.Update(directortest.Specs(up.addr()))
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, url, "dc", streamBody)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-upstreamGone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
	if c := waitCounts(t, env, "dc", ended); c.Dispatch != 1 || c.FirstChunk != 1 || c.Fail != 1 || c.Finish != 0 {
		t.Fatalf("hooks %+v, want one fail after the first chunk", c)
	}
}

func ended(c directortest.Counts) bool { return c.Finish+c.Fail > 0 }

// waitCounts waits (bounded) until the request's hooks satisfy done: the
// gateway ends a request after its last byte reached the client, so a
// client may finish reading a moment before the hook runs.
func waitCounts(t *testing.T, env *directortest.Env, id string, done func(directortest.Counts) bool) directortest.Counts {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := env.Counter.Get(id)
		if done(c) || time.Now().After(deadline) {
			return c
		}
		time.Sleep(time.Millisecond)
	}
}

func TestUpstreamDiesMidStream(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		// A chunked SSE response cut after its first chunk.
		buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		buf.WriteString("a\r\ndata: {}\n\n\r\n")
		buf.Flush()
		conn.Close()
	})
	env, url := startGateway(t, 1)
	env.Store.Update(directortest.Specs(up.addr()))
	resp := post(t, context.Background(), url, "cut", streamBody)
	_, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Error("the client must see a truncated stream, not a clean end")
	}
	if c := waitCounts(t, env, "cut", ended); c.FirstChunk != 1 || c.Fail != 1 || c.Finish != 0 {
		t.Fatalf("hooks %+v, want first chunk then one fail", c)
	}
	if hs, _ := up.got(); len(hs) != 1 {
		t.Fatalf("a request whose bytes reached the endpoint was retried (%d attempts)", len(hs))
	}
}
