package kvtransfer

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Sidecar.
type Options struct {
	// Decoder is the local vLLM's base URL, e.g. http://127.0.0.1:8200.
	Decoder string
	// Allow is the SSRF allow-list for prefill and encoder addresses
	// (required; the decoder's own address is always allowed).
	Allow Allower
	// PrefillTimeout bounds the prefill leg, retries included (default 60s).
	// When it expires the decoder prefills locally.
	PrefillTimeout time.Duration
	// EncodeTimeout bounds the encoder legs (default 30s); an encoder that
	// has not answered by then is skipped.
	EncodeTimeout time.Duration
	// Retries is how many times the prefill leg is retried after a 502,
	// 503, 504 or a connection error (default 2; negative = none).
	Retries int
	// Backoff is the wait before the first retry, doubled for each next one
	// and capped at 1 s (default 50ms).
	Backoff time.Duration
	// MaxBodyBytes caps request and buffered response bodies (default 64 MiB).
	MaxBodyBytes int64
	// DialTimeout bounds connecting to any leg (default 5s).
	DialTimeout time.Duration
	// Logger receives refusals and leg failures (slog.Default() when nil).
	Logger *slog.Logger
	// Registerer exposes the sidecar's metrics (none when nil).
	Registerer prometheus.Registerer
	// ObserveOverhead, when set, receives each orchestrated request's
	// sidecar-added time: wall time minus the time spent waiting on legs.
	ObserveOverhead func(time.Duration)
}

// Sidecar is the decode pod's HTTP front. POSTs to /v1/chat/completions,
// /v1/completions and /v1/responses are orchestrated (encoder legs, prefill
// leg, decode leg); every other request is proxied to the decoder as is.
type Sidecar struct {
	o         Options
	decoder   *url.URL
	decAddr   string
	transport *http.Transport
	client    *http.Client
	proxy     *httputil.ReverseProxy
	log       *slog.Logger
	m         sidecarMetrics
}

type sidecarMetrics struct {
	requests  *prometheus.CounterVec
	legErrors *prometheus.CounterVec
	refused   prometheus.Counter
	overhead  prometheus.Histogram
}

// New builds a sidecar.
func New(o Options) (*Sidecar, error) {
	if o.Decoder == "" {
		return nil, fmt.Errorf("decoder URL is required")
	}
	u, err := url.Parse(o.Decoder)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("decoder %q: want an http(s)://host:port URL", o.Decoder)
	}
	if o.Allow == nil {
		return nil, fmt.Errorf("an allow-list is required (the sidecar dials only listed prefill and encoder addresses)")
	}
	if o.PrefillTimeout <= 0 {
		o.PrefillTimeout = 60 * time.Second
	}
	if o.EncodeTimeout <= 0 {
		o.EncodeTimeout = 30 * time.Second
	}
	if o.Retries == 0 {
		o.Retries = 2
	} else if o.Retries < 0 {
		o.Retries = 0
	}
	if o.Backoff <= 0 {
		o.Backoff = 50 * time.Millisecond
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 64 << 20
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	decAddr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		decAddr = net.JoinHostPort(u.Hostname(), port)
	}
	s := &Sidecar{o: o, decoder: u, decAddr: decAddr, log: o.Logger}
	s.transport = &http.Transport{
		DialContext:         guardedDialer(&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}, s.dialAllowed),
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	s.client = &http.Client{Transport: s.transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	s.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			for h := range routingHeaders {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     s.transport,
		FlushInterval: -1,
	}
	s.m = sidecarMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spillway", Name: "sidecar_requests_total",
			Help: "Orchestrated requests by API path and how the prompt was prefilled (remote, fallback-local, local)."}, []string{"path", "prefill"}),
		legErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "spillway", Name: "sidecar_leg_errors_total",
			Help: "Failed legs by leg (encode, prefill, decode)."}, []string{"leg"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "spillway", Name: "sidecar_refused_total",
			Help: "Requests refused with 403 because a routing header named an address outside the allow-list."}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "spillway", Name: "sidecar_overhead_seconds",
			Help:    "Time the sidecar adds to a request: wall time minus the time spent waiting on legs.",
			Buckets: []float64{2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2}}),
	}
	if r := o.Registerer; r != nil {
		for _, c := range []prometheus.Collector{s.m.requests, s.m.legErrors, s.m.refused, s.m.overhead} {
			if err := r.Register(c); err != nil {
				return nil, fmt.Errorf("registering sidecar metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Close releases idle connections.
func (s *Sidecar) Close() { s.transport.CloseIdleConnections() }

func (s *Sidecar) dialAllowed(addr string) bool {
	return strings.EqualFold(addr, s.decAddr) || s.o.Allow.Allowed(addr)
}

func orchestrated(path string) bool {
	return path == PathChatCompletions || path == PathCompletions || path == PathResponses
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeError answers a typed sidecar error in the OpenAI error shape.
func writeError(w http.ResponseWriter, code int, reason, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": msg, "type": "spillway_sidecar_error", "code": code, "reason": reason,
	}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(HeaderError, reason)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// waitClock sums the time a request spends waiting on legs; the rest of its
// wall time is the sidecar's own overhead.
type waitClock struct {
	mu     sync.Mutex
	waited time.Duration
}

func (c *waitClock) add(d time.Duration) { c.mu.Lock(); c.waited += d; c.mu.Unlock() }

func (c *waitClock) since(t0 time.Time) { c.add(time.Since(t0)) }

type timedReader struct {
	r io.Reader
	c *waitClock
}

func (t timedReader) Read(p []byte) (int, error) {
	t0 := time.Now()
	n, err := t.r.Read(p)
	t.c.since(t0)
	return n, err
}

// ServeHTTP implements http.Handler.
func (s *Sidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !orchestrated(r.URL.Path) {
		s.proxy.ServeHTTP(w, r)
		return
	}
	start := time.Now()
	wc := &waitClock{}
	rid := r.Header.Get(HeaderRequestID)
	if rid == "" {
		rid = newRequestID()
	}
	prefiller := strings.TrimSpace(r.Header.Get(HeaderPrefiller))
	encoders := splitList(r.Header.Get(HeaderEncoders))
	// The SSRF guard runs before the body is even read: nothing is dialed
	// for a request that names an address outside the pool.
	check := func(header, addr string) bool {
		if s.o.Allow.Allowed(addr) {
			return true
		}
		s.m.refused.Inc()
		s.log.Warn("sidecar: refused request: routing header names an address outside the allow-list",
			"header", header, "address", addr, "request_id", rid, "remote", r.RemoteAddr, "path", r.URL.Path)
		writeError(w, http.StatusForbidden, ReasonForbiddenHost, fmt.Sprintf("%s %q is not an endpoint of this pool", header, addr))
		return false
	}
	if prefiller != "" && !check(HeaderPrefiller, prefiller) {
		return
	}
	for _, e := range encoders {
		if !check(HeaderEncoders, e) {
			return
		}
	}
	// Receiving the client's body is not sidecar work (the decoder would
	// wait for it just the same): it counts as waiting.
	t0 := time.Now()
	raw, err := readBody(http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes), r.ContentLength, s.o.MaxBodyBytes)
	wc.since(t0)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, ReasonBadRequest, fmt.Sprintf("request body over %d bytes", s.o.MaxBodyBytes))
			return
		}
		if r.Context().Err() == nil {
			writeError(w, http.StatusBadRequest, ReasonBadRequest, "reading request body: "+err.Error())
		}
		return
	}
	ctx := r.Context()
	hdr := legHeaders(r.Header, rid)

	// Plain pass-through when there is nothing to orchestrate and nothing
	// to strip: the decoder sees the client's bytes.
	var f fields
	stripped := false
	if prefiller != "" || len(encoders) > 0 || bytes.Contains(raw, []byte("_transfer_params")) {
		f, err = parseBody(raw)
		if err != nil {
			writeError(w, http.StatusBadRequest, ReasonBadRequest, err.Error())
			return
		}
		stripped = bytes.Contains(raw, []byte("_transfer_params"))
	}

	var ec json.RawMessage
	if len(encoders) > 0 {
		parts, err := multimodalParts(r.URL.Path, f)
		if err != nil {
			writeError(w, http.StatusBadRequest, ReasonBadRequest, err.Error())
			return
		}
		if len(parts) > 0 {
			t0 := time.Now()
			model, _ := f.get("model")
			ec = s.encode(ctx, rid, hdr, model, parts, encoders)
			wc.since(t0)
			if ctx.Err() != nil {
				return // client gone; the legs were cancelled with it
			}
		}
	}

	mode := "local"
	var kv json.RawMessage
	var cached *int
	var prefillMs string
	if prefiller != "" {
		t0 := time.Now()
		res, err := s.prefill(ctx, r.URL.Path, prefiller, hdr, prefillBody(r.URL.Path, f, ec))
		d := time.Since(t0)
		wc.add(d)
		prefillMs = strconv.FormatInt(d.Milliseconds(), 10)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.m.legErrors.WithLabelValues("prefill").Inc()
			s.log.Warn("sidecar: prefill leg failed; decoding with local prefill", "prefiller", prefiller, "request_id", rid, "err", err)
			mode = PrefillFallbackLocal
		} else {
			mode = PrefillRemote
			kv = res.KV
			if c, ok := res.cachedTokens(); ok {
				cached = &c
			}
			ec = nil // consumed by the prefiller
		}
	}
	s.m.requests.WithLabelValues(r.URL.Path, mode).Inc()

	body := decodeBody(raw, f, stripped, kv, ec)
	s.decode(ctx, w, r, hdr, body, mode, prefillMs, cached, wc)
	if s.o.ObserveOverhead != nil || s.o.Registerer != nil {
		over := time.Since(start) - wc.waited
		s.m.overhead.Observe(over.Seconds())
		if s.o.ObserveOverhead != nil {
			s.o.ObserveOverhead(over)
		}
	}
}

// legHeaders are the client's headers minus hop-by-hop, routing and
// framing headers, with the shared request id.
func legHeaders(in http.Header, rid string) http.Header {
	out := make(http.Header, len(in)+2)
	for k, v := range in {
		lk := strings.ToLower(k)
		if hopHeaders[lk] || routingHeaders[lk] || lk == "content-length" || lk == "host" || lk == "accept-encoding" {
			continue
		}
		out[k] = v
	}
	out.Set("Content-Type", "application/json")
	out.Set(HeaderRequestID, rid)
	return out
}

func (s *Sidecar) post(ctx context.Context, addr, path string, hdr http.Header, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = hdr.Clone()
	return s.client.Do(req)
}

// encode runs one encoder leg per multimodal item in parallel and merges
// the ec_transfer_params they return. A failed leg is logged and skipped:
// the prefiller then encodes that item itself.
func (s *Sidecar) encode(ctx context.Context, rid string, hdr http.Header, model json.RawMessage, parts []json.RawMessage, encoders []string) json.RawMessage {
	ctx, cancel := context.WithTimeout(ctx, s.o.EncodeTimeout)
	defer cancel()
	out := make([]json.RawMessage, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		addr := encoders[i%len(encoders)]
		h := hdr.Clone()
		h.Set(HeaderRequestID, rid+"-encode-"+strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			ec, err := s.encodeOne(ctx, addr, h, encoderBody(model, part))
			if err != nil {
				if ctx.Err() == nil || !errors.Is(ctx.Err(), context.Canceled) {
					s.m.legErrors.WithLabelValues("encode").Inc()
					s.log.Warn("sidecar: encoder leg failed; continuing without its handoff", "encoder", addr, "item", i, "request_id", rid, "err", err)
				}
				return
			}
			out[i] = ec
		}()
	}
	wg.Wait()
	return mergeEC(out)
}

func (s *Sidecar) encodeOne(ctx context.Context, addr string, hdr http.Header, body []byte) (json.RawMessage, error) {
	resp, err := s.post(ctx, addr, PathChatCompletions, hdr, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, s.o.MaxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("reading encoder response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("encoder answered %d: %s", resp.StatusCode, truncate(b))
	}
	var lr legResponse
	if err := json.Unmarshal(b, &lr); err != nil {
		return nil, fmt.Errorf("encoder response: %w", err)
	}
	if isNull(lr.EC) {
		return nil, fmt.Errorf("encoder response has no ec_transfer_params")
	}
	return lr.EC, nil
}

// readBody reads a request body into one buffer sized from Content-Length.
func readBody(r io.Reader, length, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	if length > 0 && length <= limit {
		buf.Grow(int(length) + 1)
	}
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// retryable statuses of the prefill leg.
func retryable(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// prefill runs the prefill leg with bounded retries, all within
// PrefillTimeout.
func (s *Sidecar) prefill(ctx context.Context, path, addr string, hdr http.Header, body []byte) (*legResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.PrefillTimeout)
	defer cancel()
	wait := s.o.Backoff
	for attempt := 0; ; attempt++ {
		lr, retry, err := s.prefillOnce(ctx, path, addr, hdr, body)
		if err == nil {
			return lr, nil
		}
		if !retry || attempt >= s.o.Retries || ctx.Err() != nil {
			return nil, fmt.Errorf("prefill leg to %s (attempt %d of %d): %w", addr, attempt+1, s.o.Retries+1, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("prefill leg to %s: waiting to retry: %w (last error: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

func (s *Sidecar) prefillOnce(ctx context.Context, path, addr string, hdr http.Header, body []byte) (*legResponse, bool, error) {
	resp, err := s.post(ctx, addr, path, hdr, body)
	if err != nil {
		return nil, !errors.Is(err, ErrForbiddenHost), err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, s.o.MaxBodyBytes))
	if err != nil {
		return nil, true, fmt.Errorf("reading prefill response: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, retryable(resp.StatusCode), fmt.Errorf("prefiller answered %d: %s", resp.StatusCode, truncate(b))
	}
	var lr legResponse
	if err := json.Unmarshal(b, &lr); err != nil {
		return nil, false, fmt.Errorf("prefill response: %w", err)
	}
	if isNull(lr.KV) {
		return nil, false, fmt.Errorf("prefill response has no kv_transfer_params")
	}
	return &lr, false, nil
}

// decode runs the decode leg and relays its answer. It is never retried:
// after a successful prefill a second decode would run the request twice.
func (s *Sidecar) decode(ctx context.Context, w http.ResponseWriter, r *http.Request, hdr http.Header, body []byte, mode, prefillMs string, cached *int, wc *waitClock) {
	u := *s.decoder
	u.Path = strings.TrimSuffix(u.Path, "/") + r.URL.Path
	u.RawQuery = r.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, ReasonDecodeLegFailed, err.Error())
		return
	}
	req.Header = hdr
	t0 := time.Now()
	resp, err := s.client.Do(req)
	wc.since(t0)
	setPrefillHeaders := func() {
		if mode != "local" {
			w.Header().Set(HeaderPrefill, mode)
		}
		if prefillMs != "" {
			w.Header().Set(HeaderPrefillDoneMs, prefillMs)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.m.legErrors.WithLabelValues("decode").Inc()
		s.log.Warn("sidecar: decode leg failed", "request_id", hdr.Get(HeaderRequestID), "prefill", mode, "err", err)
		setPrefillHeaders()
		writeError(w, http.StatusBadGateway, ReasonDecodeLegFailed, "decode leg failed: "+err.Error())
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		lk := strings.ToLower(k)
		if hopHeaders[lk] || lk == "content-length" {
			continue
		}
		w.Header()[k] = v
	}
	setPrefillHeaders()
	in := timedReader{r: resp.Body, c: wc}
	if resp.StatusCode/100 != 2 {
		s.m.legErrors.WithLabelValues("decode").Inc()
		w.Header().Set(HeaderError, ReasonDecodeLegFailed)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(in, s.o.MaxBodyBytes))
		return
	}
	if strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream") {
		w.WriteHeader(resp.StatusCode)
		if err := relaySSE(w, in, cached); err != nil && ctx.Err() == nil {
			s.m.legErrors.WithLabelValues("decode").Inc()
			s.log.Warn("sidecar: decode stream interrupted", "request_id", hdr.Get(HeaderRequestID), "err", err)
			ev, _ := json.Marshal(map[string]any{"error": map[string]any{
				"message": "decode stream interrupted: " + err.Error(), "type": "spillway_sidecar_error",
				"code": http.StatusBadGateway, "reason": ReasonDecodeStreamInterrupted}})
			_, _ = fmt.Fprintf(w, "data: %s\n\n", ev)
			if fl, ok := w.(http.Flusher); ok {
				fl.Flush()
			}
		}
		return
	}
	b, err := io.ReadAll(io.LimitReader(in, s.o.MaxBodyBytes))
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.m.legErrors.WithLabelValues("decode").Inc()
		for k := range w.Header() {
			w.Header().Del(k)
		}
		setPrefillHeaders()
		writeError(w, http.StatusBadGateway, ReasonDecodeLegFailed, "decode leg failed reading the response: "+err.Error())
		return
	}
	if cached != nil {
		b = rewriteCached(b, *cached)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
}
