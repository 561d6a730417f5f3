package extproc_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/director/directortest"
	"github.com/spillway-llm/spillway/extproc"
	"github.com/spillway-llm/spillway/profiles"
)

// harness runs the real ext_proc server on a loopback port.
type harness struct {
	env     *directortest.Env
	client  extprocv3.ExternalProcessorClient
	health  healthpb.HealthClient
	hhealth healthpb.HealthClient
}

func start(t testing.TB, fallbacks int, opts director.Options) *harness {
	t.Helper()
	env := directortest.New(t, fallbacks, opts)
	h := serveDirector(t, env.Director, env.Store.Synced)
	h.env = env
	return h
}

// serveDirector runs extproc.Serve for d on loopback ports and connects.
func serveDirector(t testing.TB, d *director.Director, ready func() bool) *harness {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- extproc.Serve(ctx, extproc.NewServer(d, nil), extproc.ServeOptions{
			Listener: ln, HealthListener: hln, Ready: ready, ReadyPoll: 5 * time.Millisecond,
		})
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), append(envoyWindows, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	hconn, err := grpc.NewClient(hln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		hconn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &harness{client: extprocv3.NewExternalProcessorClient(conn), health: healthpb.NewHealthClient(conn), hhealth: healthpb.NewHealthClient(hconn)}
}

// envoyWindows mimics Envoy's large HTTP/2 flow-control windows.
var envoyWindows = []grpc.DialOption{grpc.WithInitialWindowSize(256 << 20), grpc.WithInitialConnWindowSize(256 << 20)}

func hdrs(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func reqHeaders(id string, eos bool, md *corev3.Metadata, extra ...string) *extprocv3.ProcessingRequest {
	kv := append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "gw", "content-type", "application/json", "x-request-id", id}, extra...)
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}},
		MetadataContext: md,
	}
}

func reqBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func respHeaders(md *corev3.Metadata, eos bool, kv ...string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hdrs(kv...), EndOfStream: eos}},
		MetadataContext: md,
	}
}

func respBody(b string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func hintMD(addrs ...string) *corev3.Metadata {
	vals := make([]any, len(addrs))
	for i, a := range addrs {
		vals[i] = a
	}
	s, err := structpb.NewStruct(map[string]any{director.HeaderSubset: vals})
	if err != nil {
		panic(err)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{director.MetadataSubsetHint: s}}
}

func servedMD(addr string) *corev3.Metadata {
	s, _ := structpb.NewStruct(map[string]any{director.HeaderServed: addr})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{director.MetadataLB: s}}
}

type stream struct {
	t testing.TB
	s extprocv3.ExternalProcessor_ProcessClient
}

func (h *harness) open(t testing.TB) (*stream, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &stream{t: t, s: s}, cancel
}

func (s *stream) send(msgs ...*extprocv3.ProcessingRequest) {
	s.t.Helper()
	for _, m := range msgs {
		if err := s.s.Send(m); err != nil {
			s.t.Fatalf("send: %v", err)
		}
	}
}

func (s *stream) recv() *extprocv3.ProcessingResponse {
	s.t.Helper()
	r, err := s.s.Recv()
	if err != nil {
		s.t.Fatalf("recv: %v", err)
	}
	return r
}

// routed is what the request phase answered.
type routed struct {
	set       map[string]string
	removed   []string
	metadata  string
	clear     bool
	body      []byte
	chunks    []int
	bodyEOS   bool
	immediate *extprocv3.ImmediateResponse
}

// recvRouting reads the headers response and, when the request had a body,
// the streamed body until its end of stream.
func (s *stream) recvRouting(withBody bool) routed {
	s.t.Helper()
	var r routed
	first := s.recv()
	if im := first.GetImmediateResponse(); im != nil {
		r.immediate = im
		return r
	}
	hr := first.GetRequestHeaders()
	if hr == nil {
		s.t.Fatalf("first answer is %T, want request headers", first.Response)
	}
	r.clear = hr.GetResponse().GetClearRouteCache()
	r.set = map[string]string{}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		r.set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	r.removed = hr.GetResponse().GetHeaderMutation().GetRemoveHeaders()
	r.metadata = first.GetDynamicMetadata().GetFields()[director.MetadataLB].GetStructValue().GetFields()[director.HeaderDestination].GetStringValue()
	for withBody && !r.bodyEOS {
		m := s.recv()
		br := m.GetRequestBody()
		if br == nil {
			s.t.Fatalf("got %T while streaming the request body back", m.Response)
		}
		sr := br.GetResponse().GetBodyMutation().GetStreamedResponse()
		r.body = append(r.body, sr.GetBody()...)
		r.chunks = append(r.chunks, len(sr.GetBody()))
		r.bodyEOS = sr.GetEndOfStream()
	}
	return r
}

const chat = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"tell me a story"}]}`

func TestEnvoyStyleStreamingExchange(t *testing.T) {
	h := start(t, 1, director.Options{})
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"))
	h.env.SetQueue(t, "127.0.0.1:8001", 3)
	h.env.SetQueue(t, "127.0.0.1:8002", 9)
	h.env.SetQueue(t, "127.0.0.1:8003", 0)
	s, cancel := h.open(t)
	defer cancel()

	// Request: headers (with a client-forged prefiller header), body in
	// three chunks.
	s.send(reqHeaders("req-1", false, nil, "x-prefiller-host-port", "169.254.169.254:80", "x-spillway-debug", "1"),
		reqBody(chat[:10], false), reqBody(chat[10:50], false), reqBody(chat[50:], true))
	r := s.recvRouting(true)
	if r.immediate != nil {
		t.Fatalf("immediate response %v", r.immediate)
	}
	dest := r.set[director.HeaderDestination]
	if dest != "127.0.0.1:8003,127.0.0.1:8001" {
		t.Fatalf("destination %q, want shortest queue then fallback", dest)
	}
	if r.metadata != dest {
		t.Fatalf("envoy.lb metadata %q != destination header %q", r.metadata, dest)
	}
	if !r.clear {
		t.Error("clear_route_cache not set")
	}
	if !contains(r.removed, director.HeaderPrefiller) || !contains(r.removed, director.HeaderEncoders) {
		t.Errorf("client routing headers not removed: %v", r.removed)
	}
	if string(r.body) != chat {
		t.Fatalf("body streamed back %q, want the original", r.body)
	}
	if _, ok := r.set["content-length"]; ok {
		t.Error("content-length set although the body was not rewritten")
	}

	// Response: headers with served metadata, SSE split mid-line and
	// mid-JSON, then end of stream.
	s.send(respHeaders(servedMD("127.0.0.1:8003"), false, ":status", "200", "content-type", "text/event-stream", director.HeaderPrefillDoneMs, "5"))
	rh := s.recv().GetResponseHeaders()
	if rh == nil {
		t.Fatal("want a response headers answer")
	}
	var decision string
	for _, hv := range rh.GetResponse().GetHeaderMutation().GetSetHeaders() {
		if hv.GetHeader().GetKey() == director.HeaderDecision {
			decision = string(hv.GetHeader().GetRawValue())
		}
	}
	if !strings.Contains(decision, "destination="+dest) {
		t.Errorf("x-spillway-decision %q lacks the destination", decision)
	}
	chunks := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Once\"}}],\"usage\":nu",
		"ll}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\" upon\"}}],\"usage\":null}\n",
		"\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":21,\"completion_tokens\":2,\"prompt_tok",
		"ens_details\":{\"cached_tokens\":16}}}\n\ndata: [DO",
		"NE]\n\n",
	}
	var echoed string
	for i, c := range chunks {
		s.send(respBody(c, i == len(chunks)-1))
		sr := s.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		echoed += string(sr.GetBody())
		if sr.GetEndOfStream() != (i == len(chunks)-1) {
			t.Fatalf("chunk %d: end_of_stream %v", i, sr.GetEndOfStream())
		}
	}
	if echoed != strings.Join(chunks, "") {
		t.Fatalf("response body altered: %q", echoed)
	}
	// Envoy may repeat the end of stream; it must change nothing and get
	// no answer.
	s.send(respBody("", true))
	if err := s.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if m, err := s.s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the duplicated end of stream: %v %v, want the stream to end", m, err)
	}
	c := h.env.Counter.Get("req-1")
	want := directortest.Counts{Dispatch: 1, FirstChunk: 1, PrefillDone: 1, Finish: 1,
		Usage:       profiles.Usage{PromptTokens: 21, CompletionTokens: 2, CachedTokens: 16, Reported: true, TTFT: c.Usage.TTFT},
		Destination: dest}
	if c != want {
		t.Fatalf("lifecycle hooks %+v, want %+v", c, want)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestSubsetHintObeyed(t *testing.T) {
	h := start(t, 2, director.Options{})
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003"))
	h.env.SetQueue(t, "127.0.0.1:8001", 0) // the best, but not in the hint
	for i := range 5 {
		s, cancel := h.open(t)
		s.send(reqHeaders("hint", false, hintMD("127.0.0.1:8002", "127.0.0.1:8003")), reqBody(chat, true))
		r := s.recvRouting(true)
		cancel()
		if r.immediate != nil {
			t.Fatalf("immediate %v", r.immediate)
		}
		for _, a := range strings.Split(r.set[director.HeaderDestination], ",") {
			if a != "127.0.0.1:8002" && a != "127.0.0.1:8003" {
				t.Fatalf("try %d: destination %q outside the subset hint", i, r.set[director.HeaderDestination])
			}
		}
		if r.metadata != r.set[director.HeaderDestination] {
			t.Fatalf("metadata %q != header %q", r.metadata, r.set[director.HeaderDestination])
		}
	}
	// An empty hint, or one naming no known endpoint, is a 503.
	for _, md := range []*corev3.Metadata{hintMD(), hintMD("10.9.9.9:1")} {
		s, cancel := h.open(t)
		s.send(reqHeaders("hint-empty", false, md), reqBody(chat, true))
		r := s.recvRouting(true)
		cancel()
		if r.immediate == nil || r.immediate.GetStatus().GetCode() != 503 {
			t.Fatalf("subset hint %v: %+v, want an immediate 503", md, r)
		}
	}
}

func TestImmediateResponses(t *testing.T) {
	h := start(t, 0, director.Options{})
	check := func(name string, wantCode int, msgs ...*extprocv3.ProcessingRequest) {
		t.Helper()
		s, cancel := h.open(t)
		defer cancel()
		s.send(msgs...)
		im := s.recv().GetImmediateResponse()
		if im == nil || int(im.GetStatus().GetCode()) != wantCode {
			t.Fatalf("%s: %v, want immediate %d", name, im, wantCode)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(im.GetBody(), &e); err != nil || e.Error.Code != wantCode || e.Error.Message == "" {
			t.Fatalf("%s: body %s is not an OpenAI error (%v)", name, im.GetBody(), err)
		}
	}
	check("no endpoint", 503, reqHeaders("n", false, nil), reqBody(chat, true))
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001"))
	check("malformed body", 400, reqHeaders("m", false, nil), reqBody(`{"model":"m","messages":[{"role":`, false), reqBody(`"user"`, true))
	check("not an object", 400, reqHeaders("m2", false, nil), reqBody(`[1,2]`, true))
	if c := h.env.Counter.Get("m"); c.Dispatch != 0 {
		t.Errorf("malformed request dispatched: %+v", c)
	}
}

func TestShedIs429(t *testing.T) {
	h := start(t, 0, director.Options{Rewriter: shed{}})
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001"))
	s, cancel := h.open(t)
	defer cancel()
	s.send(reqHeaders("shed", false, nil), reqBody(chat, true))
	if im := s.recv().GetImmediateResponse(); im.GetStatus().GetCode() != 429 {
		t.Fatalf("got %v, want an immediate 429", im)
	}
}

// shed rejects every request as the saturation detector would.
type shed struct{}

func (shed) Rewrite(*profiles.Request, *profiles.Result) ([]byte, bool, error) {
	return nil, false, profiles.ErrShed
}

func TestHeadersOnlyRequest(t *testing.T) {
	h := start(t, 0, director.Options{})
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001"))
	s, cancel := h.open(t)
	defer cancel()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: hdrs(":method", "GET", ":path", "/v1/models", "x-request-id", "get"), EndOfStream: true}}})
	r := s.recvRouting(false)
	if r.set[director.HeaderDestination] != "127.0.0.1:8001" || r.metadata != "127.0.0.1:8001" {
		t.Fatalf("headers-only request not routed: %+v", r)
	}
	s.send(respHeaders(nil, false, ":status", "200", "content-type", "application/json"))
	s.recv()
	s.send(respBody(`{"data":[]}`, true))
	s.recv()
	if c := h.env.Counter.Get("get"); c.Finish != 1 || c.Fail != 0 || c.Usage.Reported {
		t.Fatalf("hooks %+v", c)
	}
}

func TestRewrittenBodyStreamedInBoundedChunks(t *testing.T) {
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 30000) + `"}]}`
	h := start(t, 0, director.Options{Rewriter: upper{}})
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001"))
	s, cancel := h.open(t)
	defer cancel()
	s.send(reqHeaders("big", false, nil))
	for i := 0; i < len(big); i += 16384 {
		s.send(reqBody(big[i:min(i+16384, len(big))], i+16384 >= len(big)))
	}
	// A duplicated end of stream on a large body must not corrupt it.
	s.send(reqBody("", true))
	r := s.recvRouting(true)
	want := bytes.ToUpper([]byte(big))
	if !bytes.Equal(r.body, want) {
		t.Fatalf("rewritten body differs (got %d bytes, want %d)", len(r.body), len(want))
	}
	if r.set["content-length"] != itoa(len(want)) {
		t.Fatalf("content-length %q, want %d", r.set["content-length"], len(want))
	}
	for i, n := range r.chunks {
		if n > extproc.MaxBodyChunk || (n == 0 && i != len(r.chunks)-1) {
			t.Fatalf("chunk %d has %d bytes (max %d)", i, n, extproc.MaxBodyChunk)
		}
	}
	if len(r.chunks) != (len(want)+extproc.MaxBodyChunk-1)/extproc.MaxBodyChunk {
		t.Fatalf("%d chunks for %d bytes", len(r.chunks), len(want))
	}
	// The stream must be idle now: the duplicate got no answer.
	s.send(respHeaders(nil, true, ":status", "204"))
	if s.recv().GetResponseHeaders() == nil {
		t.Fatal("the next answer must be the response headers'")
	}
}

type upper struct{}

func (upper) Rewrite(req *profiles.Request, _ *profiles.Result) ([]byte, bool, error) {
	return bytes.ToUpper(req.Body), true, nil
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestStreamCancelledBeforeResponseFails(t *testing.T) {
	h := start(t, 0, director.Options{})
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001"))
	s, cancel := h.open(t)
	s.send(reqHeaders("gone", false, nil), reqBody(chat, true))
	s.recvRouting(true)
	s.send(respHeaders(nil, false, ":status", "200", "content-type", "text/event-stream"))
	s.recv()
	s.send(respBody("data: {}\n\n", false))
	s.recv()
	cancel() // the client went away mid-stream
	// Fail runs when the server's stream ends; wait for it (bounded).
	deadline := time.Now().Add(5 * time.Second)
	for h.env.Counter.Get("gone").Fail == 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if c := h.env.Counter.Get("gone"); c.Dispatch != 1 || c.FirstChunk != 1 || c.Fail != 1 || c.Finish != 0 {
		t.Fatalf("hooks %+v, want dispatch, first chunk and one fail", c)
	}
}

func TestHealthServices(t *testing.T) {
	h := start(t, 0, director.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status := func(c healthpb.HealthClient, svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		return r.GetStatus()
	}
	for _, c := range []healthpb.HealthClient{h.health, h.hhealth} {
		if st := status(c, extproc.HealthLiveness); st != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("liveness %v", st)
		}
		if st := status(c, extproc.HealthReadiness); st != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("readiness before sync %v", st)
		}
	}
	h.env.Store.Update(directortest.Specs("127.0.0.1:8001"))
	for _, svc := range []string{extproc.HealthReadiness, extproc.HealthExtProc} {
		for status(h.hhealth, svc) != healthpb.HealthCheckResponse_SERVING {
			if ctx.Err() != nil {
				t.Fatalf("%s never became SERVING after the endpoints synced", svc)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
