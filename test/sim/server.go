package sim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Faults injects failures into a real-HTTP simulator.
type Faults struct {
	FailRate   float64       // fraction of inference requests answered FailStatus
	FailStatus int           // default 503
	StallRate  float64       // fraction of inference requests stalled (1 with Stall>0 and rate 0)
	Stall      time.Duration // wall time to stall before serving
	DieAfter   int           // after this many inference requests, stop serving (0 = never)
	Seed       uint64
}

// ServerConfig configures one real-HTTP simulated endpoint.
type ServerConfig struct {
	Name    string // engine id (vLLM's engine_id); default "<role>-<port>"
	Model   string // served model name; default "sim-model"
	Role    Role
	Profile Profile // zero: default profile
	Listen  string  // host:port; default 127.0.0.1:0
	// AdvertiseHost is the host put in kv_transfer_params / ec_transfer_params
	// and the KV-events topic; default the listen host (127.0.0.1 for a
	// wildcard listen).
	AdvertiseHost string
	TimeScale     float64 // simulated seconds per wall second (default 1)
	Faults        Faults
	KVEvents      *KVEventsConfig // nil: off
	// KVHoldTimeout is how long a prefill leg's KV stays pinned waiting for
	// the decode pull (simulated; vLLM's abort timeout, default 480 s).
	KVHoldTimeout time.Duration
	Logger        *slog.Logger
	// OnDie, if set, is called after DieAfter trips (the CLI exits).
	OnDie func()
}

// Server is one simulated vLLM endpoint speaking real HTTP.
type Server struct {
	cfg       ServerConfig
	Engine    *RealEngine
	ln        net.Listener
	srv       *http.Server
	host      string
	port      int
	reg       *prometheus.Registry
	ttft      prometheus.Histogram
	e2e       prometheus.Histogram
	reqOK     prometheus.Counter
	nreq      atomic.Int64
	dead      atomic.Bool
	rngMu     sync.Mutex
	rng       *rand.Rand
	kvMu      sync.Mutex
	holds     map[string]*kvHold
	nextBlk   int
	pub       *KVPublisher
	client    *http.Client
	log       *slog.Logger
	closeOnce sync.Once
}

type kvHold struct {
	req    *Request
	blocks []int
	tokens int
	timer  *time.Timer
}

// NewServer listens and starts serving.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Role == "" {
		cfg.Role = RoleBoth
	}
	if cfg.Profile.Name == "" {
		cfg.Profile = MustProfile(DefaultProfileName)
	}
	if cfg.Model == "" {
		cfg.Model = "sim-model"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.TimeScale <= 0 {
		cfg.TimeScale = 1
	}
	if cfg.KVHoldTimeout <= 0 {
		cfg.KVHoldTimeout = 480 * time.Second
	}
	if cfg.Faults.FailStatus == 0 {
		cfg.Faults.FailStatus = http.StatusServiceUnavailable
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, err
	}
	ta := ln.Addr().(*net.TCPAddr)
	s := &Server{cfg: cfg, ln: ln, port: ta.Port, holds: map[string]*kvHold{}, log: cfg.Logger,
		rng: rand.New(rand.NewPCG(cfg.Faults.Seed, 7)), client: &http.Client{Timeout: 30 * time.Second}}
	s.host = ta.IP.String()
	if ta.IP.IsUnspecified() {
		s.host = "127.0.0.1"
	}
	if cfg.AdvertiseHost != "" {
		s.host = cfg.AdvertiseHost
	}
	if s.cfg.Name == "" {
		s.cfg.Name = fmt.Sprintf("%s-%d", cfg.Role, s.port)
	}
	s.Engine = NewRealEngine(s.cfg.Name, cfg.Profile, cfg.Role, cfg.TimeScale)
	if cfg.KVEvents != nil {
		kc := *cfg.KVEvents
		if kc.Topic == "" {
			kc.Topic = "kv@" + s.Addr() + "@" + cfg.Model
		}
		pub, err := NewKVPublisher(context.Background(), kc)
		if err != nil {
			ln.Close()
			s.Engine.Close()
			return nil, err
		}
		s.pub = pub
		s.Engine.Do(func(e *Engine) { e.SetEventSink(pub.Sink) })
	}
	s.initMetrics()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.infer(w, r, "chat") })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.infer(w, r, "completions") })
	mux.HandleFunc("POST /v1/responses", func(w http.ResponseWriter, r *http.Request) { s.infer(w, r, "responses") })
	mux.HandleFunc("POST /tokenize", s.tokenizeHandler)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", s.health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /internal/kv/pull", s.kvPull)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return net.JoinHostPort(s.host, strconv.Itoa(s.port)) }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Name is the engine id.
func (s *Server) Name() string { return s.cfg.Name }

// Role is the served role.
func (s *Server) Role() Role { return s.cfg.Role }

// Model is the served model name.
func (s *Server) Model() string { return s.cfg.Model }

// KVEventsAddr is the bound PUB address ("" when off or dialling).
func (s *Server) KVEventsAddr() string {
	if s.pub == nil {
		return ""
	}
	return s.pub.Addr()
}

// KVReplayAddr is the bound ROUTER replay address ("" when off).
func (s *Server) KVReplayAddr() string {
	if s.pub == nil {
		return ""
	}
	return s.pub.ReplayAddr()
}

// Close stops serving and the engine (idempotent).
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.srv.Close()
		s.Engine.Close()
		if s.pub != nil {
			s.pub.Close()
		}
	})
	return err
}

func (s *Server) initMetrics() {
	s.reg = prometheus.NewRegistry()
	lbl := prometheus.Labels{"model_name": s.cfg.Model, "engine": "0"}
	snap := func(f func(Snapshot) float64) func() float64 {
		return func() float64 { return f(s.Engine.Snapshot()) }
	}
	g := func(name, help string, f func(Snapshot) float64) {
		s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: lbl}, snap(f)))
	}
	c := func(name, help string, f func(Snapshot) float64) {
		s.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: lbl}, snap(f)))
	}
	g("vllm:num_requests_waiting", "Requests waiting to be processed.", func(x Snapshot) float64 { return float64(x.Waiting) })
	g("vllm:num_requests_running", "Requests in model execution batches.", func(x Snapshot) float64 { return float64(x.Running) })
	g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func(x Snapshot) float64 { return x.KVUsage })
	c("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", func(x Snapshot) float64 { return float64(x.PrefixQueries) })
	c("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", func(x Snapshot) float64 { return float64(x.PrefixHits) })
	c("vllm:prompt_tokens_total", "Number of prefill tokens processed.", func(x Snapshot) float64 { return float64(x.PromptTokens) })
	c("vllm:generation_tokens_total", "Number of generation tokens processed.", func(x Snapshot) float64 { return float64(x.GenTokens) })
	c("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", func(x Snapshot) float64 { return float64(x.Preemptions) })
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig", ConstLabels: lbl},
		[]string{"block_size", "num_gpu_blocks"})
	info.WithLabelValues(strconv.Itoa(s.cfg.Profile.BlockSize), strconv.Itoa(s.cfg.Profile.NumGPUBlocks)).Set(1)
	s.reg.MustRegister(info)
	s.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds (simulated).", ConstLabels: lbl,
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}})
	lora := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:lora_requests_info", Help: "Running stats on lora requests.", ConstLabels: lbl},
		[]string{"running_lora_adapters", "waiting_lora_adapters", "max_lora"})
	lora.WithLabelValues("", "", "0").Set(float64(time.Now().Unix()))
	s.e2e = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds", Help: "Histogram of end to end request latency in seconds (simulated).", ConstLabels: lbl,
		Buckets: []float64{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680}})
	s.reg.MustRegister(lora, s.e2e)
	s.reqOK = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: lbl})
	s.reg.MustRegister(s.ttft, s.reqOK)
}

func writeErr(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"object": "error", "message": msg, "type": http.StatusText(status), "code": status,
		"error": map[string]any{"message": msg, "code": status}})
	w.Write(b)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.dead.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.cfg.Model, "object": "model", "created": time.Now().Unix(), "owned_by": "spillway-sim",
		"root": s.cfg.Model, "max_model_len": s.cfg.Profile.MaxModelLen}}})
}

func (s *Server) tokenizeHandler(w http.ResponseWriter, r *http.Request) {
	var q apiRequest
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		writeErr(w, 400, err.Error())
		return
	}
	t, err := q.tokenize("", s.cfg.Profile.ImageTokens)
	if err != nil {
		writeErr(w, 400, err.Error())
		return
	}
	toks := t.Tokens
	if toks == nil {
		toks = []uint32{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "max_model_len": s.cfg.Profile.MaxModelLen, "tokens": toks})
}

// faults applies fault injection; false means the request was answered.
func (s *Server) faults(w http.ResponseWriter, r *http.Request) bool {
	f := s.cfg.Faults
	n := s.nreq.Add(1)
	if s.dead.Load() {
		s.abort(w)
		return false
	}
	if f.DieAfter > 0 && n > int64(f.DieAfter) {
		if s.dead.CompareAndSwap(false, true) {
			s.log.Warn("sim: dying after requests", "n", f.DieAfter)
			go func() {
				s.srv.Close()
				if s.cfg.OnDie != nil {
					s.cfg.OnDie()
				}
			}()
		}
		s.abort(w)
		return false
	}
	s.rngMu.Lock()
	fail := f.FailRate > 0 && s.rng.Float64() < f.FailRate
	stall := f.Stall > 0 && (f.StallRate == 0 || s.rng.Float64() < f.StallRate)
	s.rngMu.Unlock()
	if stall {
		select {
		case <-time.After(f.Stall):
		case <-r.Context().Done():
			return false
		}
	}
	if fail {
		writeErr(w, f.FailStatus, "sim: injected failure")
		return false
	}
	return true
}

func (s *Server) abort(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	writeErr(w, http.StatusServiceUnavailable, "sim: dead")
}

// sink carries engine events to a handler goroutine without blocking the engine.
type sink struct {
	mu     sync.Mutex
	notify chan struct{}
	tokens int
	first  time.Time
	res    *Result
}

func newSink() *sink { return &sink{notify: make(chan struct{}, 1)} }
func (k *sink) poke() {
	select {
	case k.notify <- struct{}{}:
	default:
	}
}

func (s *Server) infer(w http.ResponseWriter, r *http.Request, kind string) {
	if !s.faults(w, r) {
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeErr(w, 400, err.Error())
		return
	}
	var q apiRequest
	if err := json.Unmarshal(body, &q); err != nil {
		writeErr(w, 400, "invalid JSON: "+err.Error())
		return
	}
	if q.Model != "" && q.Model != s.cfg.Model {
		writeErr(w, 404, fmt.Sprintf("The model `%s` does not exist.", q.Model))
		return
	}
	tok, err := q.tokenize(kind, s.cfg.Profile.ImageTokens)
	if err != nil {
		writeErr(w, 400, err.Error())
		return
	}
	if len(tok.Tokens) == 0 {
		writeErr(w, 400, "empty prompt")
		return
	}
	p := &s.cfg.Profile
	req := &Request{ID: r.Header.Get("x-request-id"), Prompt: tok.Tokens, MaxTokens: q.maxTokens(p.DefaultMaxTokens)}
	req.OutputTokens = OutputTokens(req.MaxTokens)
	if req.ID == "" {
		req.ID = fmt.Sprintf("sim-%d-%d", s.port, s.nreq.Load())
	}
	kv := q.KVTransferParams
	var extra map[string]any
	switch {
	case s.cfg.Role == RoleEncode:
		// The encoder runs only the vision tower over the image tokens.
		n := len(tok.Images) * p.ImageTokens
		if n == 0 {
			writeErr(w, 400, "encode endpoint: request has no multimodal items")
			return
		}
		req.Prompt = AppendImage(nil, strings.Join(tok.Images, "|"), n)
		req.MaxTokens = 1
		q.Stream = false
		ec := map[string]ECTransferItem{}
		for _, u := range tok.Images {
			ec[MMHash(u)] = ECTransferItem{PeerHost: s.host, PeerPort: s.port, SizeBytes: int64(p.ImageTokens) * p.EncodeBytesPerTok,
				NixlAgentMetadataB64: base64.StdEncoding.EncodeToString([]byte("sim-nixl-agent:" + s.cfg.Name))}
		}
		extra = map[string]any{"ec_transfer_params": ec}
	case kv != nil && kv.DoRemoteDecode:
		if s.cfg.Role != RolePrefill && s.cfg.Role != RoleBoth {
			writeErr(w, 400, "do_remote_decode sent to a "+string(s.cfg.Role)+" endpoint")
			return
		}
		req.MaxTokens = 1
		req.HoldKV = true
		q.Stream = false
	case kv != nil && kv.DoRemotePrefill:
		if s.cfg.Role != RoleDecode && s.cfg.Role != RoleBoth {
			writeErr(w, 400, "do_remote_prefill sent to a "+string(s.cfg.Role)+" endpoint")
			return
		}
		status, err := s.pullKV(r.Context(), kv, len(req.Prompt))
		if err != nil {
			writeErr(w, status, err.Error())
			return
		}
		req.RemotePrefill = true
		req.TransferDelay = p.TransferTime(len(req.Prompt))
	}
	k := newSink()
	req.OnFirstToken = func(_ *Request, t time.Time) {
		k.mu.Lock()
		k.first = t
		k.mu.Unlock()
	}
	req.OnToken = func(_ *Request, _ time.Time, n int) {
		k.mu.Lock()
		k.tokens = n
		k.mu.Unlock()
		k.poke()
	}
	req.OnComplete = func(_ *Request, res Result) {
		k.mu.Lock()
		k.res = &res
		k.mu.Unlock()
		k.poke()
	}
	s.Engine.Submit(req)
	if q.Stream {
		s.stream(w, r, kind, &q, req, k)
		return
	}
	var res Result
	for {
		select {
		case <-r.Context().Done():
			return
		case <-k.notify:
		}
		k.mu.Lock()
		done := k.res
		k.mu.Unlock()
		if done != nil {
			res = *done
			break
		}
	}
	if res.Err != nil {
		writeErr(w, 400, res.Err.Error())
		return
	}
	s.finished(res)
	if req.HoldKV {
		extra = map[string]any{"kv_transfer_params": s.hold(req, res)}
	}
	text := completionText(res.CompletionTokens)
	out := s.responseBody(kind, req.ID, text, res, extra)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-sim-ttft-seconds", strconv.FormatFloat(res.TTFT().Seconds(), 'f', 6, 64))
	w.Write(out)
}

func (s *Server) finished(res Result) {
	s.ttft.Observe(res.TTFT().Seconds())
	s.e2e.Observe(res.Finish.Sub(res.Arrival).Seconds())
	s.reqOK.Inc()
}

func completionText(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(OutputWord(i))
	}
	return b.String()
}

func usageOf(kind string, res Result) map[string]any {
	if kind == "responses" {
		return map[string]any{"input_tokens": res.PromptTokens, "output_tokens": res.CompletionTokens,
			"total_tokens":         res.PromptTokens + res.CompletionTokens,
			"input_tokens_details": map[string]any{"cached_tokens": res.CachedTokens}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	}
	return map[string]any{"prompt_tokens": res.PromptTokens, "completion_tokens": res.CompletionTokens,
		"total_tokens":          res.PromptTokens + res.CompletionTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": res.CachedTokens}}
}

// simInfo is the non-standard "sim" field: simulated timings (arrival_s
// is seconds since the engine started, in simulated time).
func (s *Server) simInfo(res Result) map[string]any {
	return map[string]any{"ttft_s": res.TTFT().Seconds(), "e2e_s": res.Finish.Sub(res.Arrival).Seconds(),
		"arrival_s": res.Arrival.Sub(s.Engine.Epoch).Seconds(), "preemptions": res.Preemptions}
}

func (s *Server) responseBody(kind, id, text string, res Result, extra map[string]any) []byte {
	now := time.Now().Unix()
	var m map[string]any
	switch kind {
	case "chat":
		m = map[string]any{"id": "chatcmpl-" + id, "object": "chat.completion", "created": now, "model": s.cfg.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "length"}},
			"usage":   usageOf(kind, res)}
	case "completions":
		m = map[string]any{"id": "cmpl-" + id, "object": "text_completion", "created": now, "model": s.cfg.Model,
			"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": "length"}}, "usage": usageOf(kind, res)}
	default:
		m = responsesObject(id, s.cfg.Model, text, "completed", &res)
	}
	for k, v := range extra {
		m[k] = v
	}
	m["sim"] = s.simInfo(res)
	b, _ := json.Marshal(m)
	return b
}

func responsesObject(id, model, text, status string, res *Result) map[string]any {
	m := map[string]any{"id": "resp_" + id, "object": "response", "created_at": time.Now().Unix(), "model": model, "status": status, "output": []any{}}
	if res != nil {
		m["output"] = []any{map[string]any{"type": "message", "id": "msg_" + id, "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}}
		m["usage"] = usageOf("responses", *res)
	}
	return m
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, kind string, q *apiRequest, req *Request, k *sink) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if fl != nil {
		fl.Flush()
	}
	includeUsage := q.StreamOptions != nil && q.StreamOptions.IncludeUsage
	created := time.Now().Unix()
	var buf bytes.Buffer
	send := func(event string, v any) {
		if event != "" {
			buf.WriteString("event: " + event + "\n")
		}
		b, _ := json.Marshal(v)
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	chunk := func(delta map[string]any, text string, finish any) map[string]any {
		if kind == "completions" {
			return map[string]any{"id": "cmpl-" + req.ID, "object": "text_completion", "created": created, "model": s.cfg.Model,
				"choices": []any{map[string]any{"index": 0, "text": text, "finish_reason": finish}}}
		}
		return map[string]any{"id": "chatcmpl-" + req.ID, "object": "chat.completion.chunk", "created": created, "model": s.cfg.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	if kind == "responses" {
		send("response.created", map[string]any{"type": "response.created", "response": responsesObject(req.ID, s.cfg.Model, "", "in_progress", nil)})
	}
	sent := 0
	var text strings.Builder
	for {
		select {
		case <-r.Context().Done():
			return // client went away; the sim keeps generating (vLLM would abort)
		case <-k.notify:
		}
		k.mu.Lock()
		n, res := k.tokens, k.res
		k.mu.Unlock()
		if res != nil && res.Err != nil {
			send("", map[string]any{"error": map[string]any{"message": res.Err.Error(), "code": 400}})
			w.Write(buf.Bytes())
			return
		}
		for ; sent < n; sent++ {
			word := OutputWord(sent)
			if sent > 0 {
				word = " " + word
			}
			text.WriteString(word)
			switch kind {
			case "responses":
				send("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_" + req.ID, "output_index": 0, "content_index": 0, "delta": word})
			default:
				delta := map[string]any{"content": word}
				if sent == 0 {
					delta["role"] = "assistant"
				}
				send("", chunk(delta, word, nil))
			}
		}
		if res != nil {
			s.finished(*res)
			switch kind {
			case "responses":
				o := responsesObject(req.ID, s.cfg.Model, text.String(), "completed", res)
				o["sim"] = s.simInfo(*res)
				send("response.completed", map[string]any{"type": "response.completed", "response": o})
			default:
				send("", chunk(map[string]any{}, "", "length"))
				if includeUsage {
					c := chunk(nil, "", nil)
					c["choices"] = []any{}
					c["usage"] = usageOf(kind, *res)
					c["sim"] = s.simInfo(*res)
					send("", c)
				}
				buf.WriteString("data: [DONE]\n\n")
			}
		}
		if buf.Len() > 0 {
			w.Write(buf.Bytes())
			buf.Reset()
			if fl != nil {
				fl.Flush()
			}
		}
		if res != nil {
			return
		}
	}
}

// hold registers a finished prefill leg's KV for the decode pull and returns
// the kv_transfer_params to hand back.
func (s *Server) hold(req *Request, res Result) KVTransferParams {
	p := &s.cfg.Profile
	nb := (len(req.Prompt) + p.BlockSize - 1) / p.BlockSize
	s.kvMu.Lock()
	ids := make([]int, nb)
	for i := range ids {
		ids[i] = (s.nextBlk + i) % p.NumGPUBlocks
	}
	s.nextBlk = (s.nextBlk + nb) % p.NumGPUBlocks
	rid := fmt.Sprintf("%s-%s-%d", s.cfg.Name, req.ID, s.nreq.Load())
	h := &kvHold{req: req, blocks: ids, tokens: len(req.Prompt)}
	s.holds[rid] = h
	h.timer = time.AfterFunc(s.Engine.WallDuration(s.cfg.KVHoldTimeout), func() { s.dropHold(rid) })
	s.kvMu.Unlock()
	eng, host, port := s.cfg.Name, s.host, s.port
	return KVTransferParams{DoRemotePrefill: true, RemoteEngineID: &eng, RemoteBlockIDs: ids, RemoteRequestID: &rid,
		RemoteHost: &host, RemotePort: &port, TPSize: p.TPSize, RemoteNumTokens: len(req.Prompt)}
}

func (s *Server) dropHold(rid string) *kvHold {
	s.kvMu.Lock()
	h := s.holds[rid]
	delete(s.holds, rid)
	s.kvMu.Unlock()
	if h != nil {
		h.timer.Stop()
		s.Engine.Release(h.req)
	}
	return h
}

// kvPullRequest is the body of POST /internal/kv/pull, the simulator's
// stand-in for a NIXL read of the prefill engine's blocks.
type kvPullRequest struct {
	RemoteEngineID  string `json:"remote_engine_id"`
	RemoteRequestID string `json:"remote_request_id"`
	RemoteBlockIDs  []int  `json:"remote_block_ids"`
	NumTokens       int    `json:"num_tokens"`
}

func (s *Server) kvPull(w http.ResponseWriter, r *http.Request) {
	var q kvPullRequest
	if err := json.NewDecoder(r.Body).Decode(&q); err != nil {
		writeErr(w, 400, err.Error())
		return
	}
	if q.RemoteEngineID != s.cfg.Name {
		writeErr(w, http.StatusConflict, fmt.Sprintf("kv pull: engine id %q is not this engine (%q)", q.RemoteEngineID, s.cfg.Name))
		return
	}
	s.kvMu.Lock()
	h := s.holds[q.RemoteRequestID]
	ok := h != nil && equalInts(h.blocks, q.RemoteBlockIDs) && (q.NumTokens == 0 || q.NumTokens == h.tokens)
	s.kvMu.Unlock()
	if h == nil {
		writeErr(w, http.StatusNotFound, "kv pull: unknown or expired remote_request_id "+q.RemoteRequestID)
		return
	}
	if !ok {
		writeErr(w, http.StatusConflict, "kv pull: block ids or token count do not match the held request")
		return
	}
	s.dropHold(q.RemoteRequestID)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"num_blocks": len(h.blocks), "num_tokens": h.tokens, "bytes": s.cfg.Profile.KVBytes(h.tokens)})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// pullKV validates kv_transfer_params and fetches the blocks from the
// prefill simulator; it returns an HTTP status for the client on failure.
func (s *Server) pullKV(ctx context.Context, kv *KVTransferParams, promptLen int) (int, error) {
	switch {
	case kv.RemoteEngineID == nil || *kv.RemoteEngineID == "":
		return 400, errors.New("kv_transfer_params: remote_engine_id missing")
	case kv.RemoteHost == nil || *kv.RemoteHost == "" || kv.RemotePort == nil || *kv.RemotePort == 0:
		return 400, errors.New("kv_transfer_params: remote_host/remote_port missing")
	case len(kv.RemoteBlockIDs) == 0:
		return 400, errors.New("kv_transfer_params: remote_block_ids missing")
	case kv.RemoteRequestID == nil:
		return 400, errors.New("kv_transfer_params: remote_request_id missing")
	}
	bs := s.cfg.Profile.BlockSize
	if want := (promptLen + bs - 1) / bs; len(kv.RemoteBlockIDs) != want {
		return 400, fmt.Errorf("kv_transfer_params: %d remote blocks for a %d-token prompt (want %d)", len(kv.RemoteBlockIDs), promptLen, want)
	}
	body, _ := json.Marshal(kvPullRequest{RemoteEngineID: *kv.RemoteEngineID, RemoteRequestID: *kv.RemoteRequestID, RemoteBlockIDs: kv.RemoteBlockIDs, NumTokens: promptLen})
	url := "http://" + net.JoinHostPort(*kv.RemoteHost, strconv.Itoa(*kv.RemotePort)) + "/internal/kv/pull"
	hr, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(hr)
	if err != nil {
		return 502, fmt.Errorf("kv pull from %s: %v", url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return 502, fmt.Errorf("kv pull from %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return 0, nil
}
