package kvtransfer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":50}`

func assertFallbackLocal(t *testing.T, r *rig, resp *http.Response, body []byte) {
	t.Helper()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s (the request must still be served)", resp.StatusCode, body)
	}
	if got := resp.Header.Get(HeaderPrefill); got != PrefillFallbackLocal {
		t.Errorf("%s = %q, want %q", HeaderPrefill, got, PrefillFallbackLocal)
	}
	if resp.Header.Get(HeaderPrefillDoneMs) == "" {
		t.Errorf("%s missing: the picker must release the prefill tokens", HeaderPrefillDoneMs)
	}
	dl := r.decoder.got()
	if len(dl) != 1 {
		t.Fatalf("decode legs %d, want 1", len(dl))
	}
	jsonEq(t, "decode body (local prefill: the original)", dl[0].Body, mustJSON(t, chatBody))
	r.prefill.waitIdle(t)
	r.decoder.waitIdle(t)
}

func TestSidecarPrefillFailsFallsBackLocal(t *testing.T) {
	r := newRig(t, rigOpts{prefill: func(w http.ResponseWriter, _ *http.Request, _ leg) {
		writeJSON(w, 503, map[string]any{"error": "overloaded"})
	}, opts: Options{Retries: 3}})
	resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: r.prefill.addr()})
	assertFallbackLocal(t, r, resp, body)
	if n := len(r.prefill.got()); n != 4 {
		t.Errorf("prefill attempts %d, want 1 + 3 retries", n)
	}
	if !strings.Contains(r.logs.String(), "prefill leg failed") {
		t.Errorf("no log line for the failed prefill: %s", r.logs.String())
	}
}

func TestSidecarPrefillRetriesThenSucceeds(t *testing.T) {
	var calls atomic.Int32
	r := newRig(t, rigOpts{prefill: func(w http.ResponseWriter, r *http.Request, l leg) {
		if calls.Add(1) == 1 {
			writeJSON(w, 502, map[string]any{"error": "bad gateway"})
			return
		}
		okPrefill(w, r, l)
	}})
	resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: r.prefill.addr(), HeaderRequestID: "rr"})
	if resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != PrefillRemote {
		t.Fatalf("status %d prefill %q: %s", resp.StatusCode, resp.Header.Get(HeaderPrefill), body)
	}
	pl := r.prefill.got()
	if len(pl) != 2 {
		t.Fatalf("prefill attempts %d, want 2", len(pl))
	}
	if string(pl[0].Raw) != string(pl[1].Raw) || pl[1].Header.Get(HeaderRequestID) != "rr" {
		t.Error("retry changed the prefill request")
	}
}

func TestSidecarPrefillNotRetriedOn400(t *testing.T) {
	r := newRig(t, rigOpts{prefill: func(w http.ResponseWriter, _ *http.Request, _ leg) {
		writeJSON(w, 400, map[string]any{"error": "bad"})
	}})
	resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: r.prefill.addr()})
	assertFallbackLocal(t, r, resp, body)
	if n := len(r.prefill.got()); n != 1 {
		t.Errorf("prefill attempts %d, want 1 (400 is not retryable)", n)
	}
}

func TestSidecarPrefillTimeoutFallsBackLocal(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	r := newRig(t, rigOpts{prefill: func(w http.ResponseWriter, r *http.Request, _ leg) {
		select { // hang until the sidecar gives up
		case <-r.Context().Done():
		case <-release:
		}
	}, opts: Options{PrefillTimeout: 100 * time.Millisecond, Retries: -1}})
	resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: r.prefill.addr()})
	assertFallbackLocal(t, r, resp, body)
}

func TestSidecarPrefillUnreachableFallsBackLocal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	r := newRig(t, rigOpts{extraAllow: []string{dead}, opts: Options{Retries: 1}})
	resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: dead})
	assertFallbackLocal(t, r, resp, body)
}

func TestSidecarPrefillWithoutKVParamsFallsBackLocal(t *testing.T) {
	r := newRig(t, rigOpts{prefill: func(w http.ResponseWriter, _ *http.Request, _ leg) {
		writeJSON(w, 200, map[string]any{"id": "p"})
	}})
	resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: r.prefill.addr()})
	assertFallbackLocal(t, r, resp, body)
}

func TestSidecarEncoderFailureContinues(t *testing.T) {
	var n atomic.Int32
	r := newRig(t, rigOpts{encoders: 2, encode: func(w http.ResponseWriter, r *http.Request, l leg) {
		if strings.Contains(string(l.Raw), "bad.png") {
			n.Add(1)
			writeJSON(w, 500, map[string]any{"error": "encoder crashed"})
			return
		}
		okEncoder(w, r, l)
	}})
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/good.png"}},{"type":"image_url","image_url":{"url":"http://x/bad.png"}}]}]}`
	resp, out := r.send(t, context.Background(), PathChatCompletions, body, map[string]string{HeaderPrefiller: r.prefill.addr(), HeaderEncoders: r.encoderList()})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if n.Load() != 1 {
		t.Fatalf("failing encoder called %d times", n.Load())
	}
	pl := r.prefill.got()
	if len(pl) != 1 {
		t.Fatalf("prefill legs %d", len(pl))
	}
	jsonEq(t, "ec_transfer_params (only the good item)", pl[0].Body["ec_transfer_params"], ecFor("http://x/good.png"))
	// All encoders fail: the prefill leg carries no ec_transfer_params.
	r2 := newRig(t, rigOpts{encoders: 1, encode: func(w http.ResponseWriter, _ *http.Request, _ leg) { writeJSON(w, 503, nil) }})
	resp, out = r2.send(t, context.Background(), PathChatCompletions, body, map[string]string{HeaderPrefiller: r2.prefill.addr(), HeaderEncoders: r2.encoderList()})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if _, ok := r2.prefill.got()[0].Body["ec_transfer_params"]; ok {
		t.Error("ec_transfer_params sent although every encoder failed")
	}
	if len(r2.encoders[0].got()) != 2 {
		t.Errorf("one encoder for two items got %d legs, want 2", len(r2.encoders[0].got()))
	}
}

// Encode-decode (no prefiller): the decoder gets the ec_transfer_params.
func TestSidecarEncodeDecode(t *testing.T) {
	r := newRig(t, rigOpts{encoders: 1})
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}]}`
	resp, out := r.send(t, context.Background(), PathChatCompletions, body, map[string]string{HeaderEncoders: r.encoderList()})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	want := mustJSON(t, body)
	want["ec_transfer_params"] = ecFor("http://x/a.png")
	jsonEq(t, "decode body", r.decoder.got()[0].Body, want)
	if len(r.prefill.got()) != 0 || resp.Header.Get(HeaderPrefill) != "" {
		t.Error("prefill leg without a prefiller")
	}
}

// blockUntilCancelled is a handler that holds its request until the client
// side goes away, and reports that it started.
func blockUntilCancelled(started chan<- struct{}) func(http.ResponseWriter, *http.Request, leg) {
	return func(w http.ResponseWriter, r *http.Request, _ leg) {
		select {
		case started <- struct{}{}:
		default:
		}
		<-r.Context().Done()
	}
}

func TestSidecarClientDisconnectCancelsLegs(t *testing.T) {
	for _, stage := range []string{"encode", "prefill", "decode-stream"} {
		t.Run(stage, func(t *testing.T) {
			started := make(chan struct{}, 1)
			o := rigOpts{encoders: 2}
			switch stage {
			case "encode":
				o.encode = blockUntilCancelled(started)
			case "prefill":
				o.prefill = blockUntilCancelled(started)
			case "decode-stream":
				o.decode = func(w http.ResponseWriter, r *http.Request, _ leg) {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: {\"choices\":[]}\n\n")
					w.(http.Flusher).Flush()
					started <- struct{}{}
					<-r.Context().Done()
				}
			}
			r := newRig(t, o)
			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}},{"type":"image_url","image_url":{"url":"http://x/b.png"}}]}]}`
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.front.URL+PathChatCompletions, strings.NewReader(body))
			req.Header.Set(HeaderPrefiller, r.prefill.addr())
			req.Header.Set(HeaderEncoders, r.encoderList())
			done := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					br := bufio.NewReader(resp.Body)
					_, err = br.ReadString('\n') // first event
					if err == nil {
						_, err = io.Copy(io.Discard, br)
					}
					resp.Body.Close()
				}
				done <- err
			}()
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the blocking leg never started")
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("client error %v, want context.Canceled", err)
			}
			for _, f := range append([]*fakeVLLM{r.decoder, r.prefill}, r.encoders...) {
				f.waitIdle(t)
			}
			if stage != "decode-stream" && len(r.decoder.got()) != 0 {
				t.Errorf("decode leg started after the client left during %s", stage)
			}
			if stage == "encode" && len(r.prefill.got()) != 0 {
				t.Error("prefill leg started after the client left during encode")
			}
		})
	}
}

func TestSidecarDecodeFailsAfterPrefill(t *testing.T) {
	t.Run("connection-dropped", func(t *testing.T) {
		r := newRig(t, rigOpts{decode: func(w http.ResponseWriter, _ *http.Request, _ leg) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close() // die without an answer
			}
		}})
		resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: r.prefill.addr()})
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502: %s", resp.StatusCode, body)
		}
		var e struct {
			Error struct {
				Reason string `json:"reason"`
				Code   int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Reason != ReasonDecodeLegFailed {
			t.Errorf("body %s: want a JSON error with reason %s", body, ReasonDecodeLegFailed)
		}
		if resp.Header.Get(HeaderError) != ReasonDecodeLegFailed || resp.Header.Get(HeaderPrefillDoneMs) == "" {
			t.Errorf("headers %v", resp.Header)
		}
		if p, d := len(r.prefill.got()), len(r.decoder.got()); p != 1 || d != 1 {
			t.Errorf("prefill legs %d, decode legs %d: nothing may run twice", p, d)
		}
		r.decoder.waitIdle(t)
	})
	t.Run("error-status", func(t *testing.T) {
		r := newRig(t, rigOpts{decode: func(w http.ResponseWriter, _ *http.Request, _ leg) {
			writeJSON(w, 500, map[string]any{"error": map[string]any{"message": "engine dead"}})
		}})
		resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: r.prefill.addr()})
		if resp.StatusCode != 500 || !strings.Contains(string(body), "engine dead") || resp.Header.Get(HeaderError) != ReasonDecodeLegFailed {
			t.Errorf("status %d body %s headers %v", resp.StatusCode, body, resp.Header)
		}
		if p, d := len(r.prefill.got()), len(r.decoder.got()); p != 1 || d != 1 {
			t.Errorf("prefill legs %d, decode legs %d", p, d)
		}
	})
	t.Run("stream-interrupted", func(t *testing.T) {
		r := newRig(t, rigOpts{decode: func(w http.ResponseWriter, _ *http.Request, _ leg) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[]}\n\n")
			w.(http.Flusher).Flush()
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = buf.Flush()
				conn.Close()
			}
		}})
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		resp, out := r.send(t, context.Background(), PathChatCompletions, body, map[string]string{HeaderPrefiller: r.prefill.addr()})
		if resp.StatusCode != 200 || !strings.Contains(string(out), ReasonDecodeStreamInterrupted) {
			t.Errorf("status %d body %q: want the stream to end with a typed error event", resp.StatusCode, out)
		}
		if strings.Contains(string(out), "[DONE]") {
			t.Error("an interrupted stream must not end with [DONE]")
		}
		if p, d := len(r.prefill.got()), len(r.decoder.got()); p != 1 || d != 1 {
			t.Errorf("prefill legs %d, decode legs %d", p, d)
		}
	})
}

func TestSidecarSSRFRefused(t *testing.T) {
	r := newRig(t, rigOpts{encoders: 1})
	for _, tc := range []struct{ header, value string }{
		{HeaderPrefiller, "169.254.169.254:80"},
		{HeaderEncoders, r.encoderList() + ",169.254.169.254:80"},
		{HeaderPrefiller, "not-an-address"},
	} {
		resp, body := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{tc.header: tc.value})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s → status %d, want 403", tc.header, tc.value, resp.StatusCode)
		}
		if !strings.Contains(string(body), ReasonForbiddenHost) {
			t.Errorf("body %s: want reason %s", body, ReasonForbiddenHost)
		}
	}
	if !strings.Contains(r.logs.String(), "169.254.169.254:80") || !strings.Contains(r.logs.String(), "refused") {
		t.Errorf("no log line for the refusal: %s", r.logs.String())
	}
	if len(r.decoder.got())+len(r.prefill.got())+len(r.encoders[0].got()) != 0 {
		t.Error("a leg ran for a refused request")
	}
}

// The dialer refuses forbidden addresses itself, before any connection
// attempt: the dial function it wraps is never reached.
func TestGuardedDialerRefusesBeforeDialing(t *testing.T) {
	al, _ := NewAllowlist("127.0.0.1:1")
	dialed := false
	d := &net.Dialer{Control: nil}
	dial := guardedDialer(d, al.Allowed)
	// Replace the dialer's resolver-free path with a trap: a Control hook
	// runs just before the socket connects.
	d.Control = func(string, string, syscall.RawConn) error { dialed = true; return errors.New("trap") }
	_ = dial // keep the closure over d
	_, err := dial(context.Background(), "tcp", "169.254.169.254:80")
	if !errors.Is(err, ErrForbiddenHost) {
		t.Fatalf("err %v, want ErrForbiddenHost", err)
	}
	if dialed {
		t.Fatal("the guard let the dialer start connecting")
	}
	// The allowed address reaches the dialer (and hits the trap).
	_, err = dial(context.Background(), "tcp", "127.0.0.1:1")
	if errors.Is(err, ErrForbiddenHost) || !dialed {
		t.Fatalf("allowed address: err %v dialed %v", err, dialed)
	}
}

func TestAllowlist(t *testing.T) {
	al, err := NewAllowlist("10.0.0.1:8000", " Pod-A.ns:8000 ", "[fd00::1]:9000")
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]bool{"10.0.0.1:8000": true, "pod-a.ns:8000": true, "[fd00::1]:9000": true,
		"10.0.0.1:8001": false, "169.254.169.254:80": false, "10.0.0.1": false, "": false} {
		if got := al.Allowed(addr); got != want {
			t.Errorf("Allowed(%q) = %v, want %v", addr, got, want)
		}
	}
	if _, err := NewAllowlist("no-port"); err == nil {
		t.Error("entry without a port accepted")
	}
}

func TestSidecarAllowFunc(t *testing.T) {
	pre := newFake(t, okPrefill)
	dec := newFake(t, okDecode)
	sc, err := New(Options{Decoder: dec.srv.URL, Allow: AllowFunc(func(a string) bool { return a == pre.addr() })})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(sc)
	defer front.Close()
	defer sc.Close()
	r := &rig{front: front}
	if resp, _ := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: pre.addr()}); resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != PrefillRemote {
		t.Errorf("allowed: %d %s", resp.StatusCode, resp.Header.Get(HeaderPrefill))
	}
	if resp, _ := r.send(t, context.Background(), PathChatCompletions, chatBody, map[string]string{HeaderPrefiller: "169.254.169.254:80"}); resp.StatusCode != 403 {
		t.Errorf("refused: %d", resp.StatusCode)
	}
}
