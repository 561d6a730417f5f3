package director_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/director/directortest"
	"github.com/spillway-llm/spillway/profiles"
)

const chatBody = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`

func inbound(id string, hdr map[string]string) director.Inbound {
	h := map[string]string{"x-request-id": id, "content-type": "application/json"}
	for k, v := range hdr {
		h[k] = v
	}
	return director.Inbound{Method: "POST", Path: "/v1/chat/completions", Headers: h, Body: []byte(chatBody)}
}

func TestRouteStripsClientRoutingHeadersAndPicksBestQueue(t *testing.T) {
	env := directortest.New(t, 1, director.Options{})
	env.Store.Update(directortest.Specs("127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"))
	env.SetQueue(t, "127.0.0.1:1001", 9)
	env.SetQueue(t, "127.0.0.1:1002", 0)
	env.SetQueue(t, "127.0.0.1:1003", 4)
	x, err := env.Director.Route(context.Background(), inbound("r1", map[string]string{
		"x-prefiller-host-port":          "169.254.169.254:80",
		"x-encoder-hosts-ports":          "10.0.0.1:1",
		"x-gateway-destination-endpoint": "10.0.0.2:2",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := x.Destination(); got != "127.0.0.1:1002,127.0.0.1:1003" {
		t.Fatalf("destination %q, want shortest queue first then one fallback", got)
	}
	for _, h := range director.RoutingHeaders {
		if v, ok := x.Req.Headers[h]; ok {
			t.Errorf("client-sent %s=%q reached the scheduler", h, v)
		}
	}
	if !x.Req.Stream || !x.Req.IncludeUsage || x.Req.Model != "m" {
		t.Errorf("request not parsed: %+v", x.Req)
	}
	if c := env.Counter.Get("r1"); c.Dispatch != 1 || c.Destination != x.Destination() {
		t.Errorf("dispatch hook: %+v", c)
	}
	if x.DebugHeader() != "" {
		t.Error("debug header without x-spillway-debug")
	}
}

func TestRouteErrors(t *testing.T) {
	env := directortest.New(t, 0, director.Options{MaxBodyBytes: 1000})
	ctx := context.Background()
	if _, err := env.Director.Route(ctx, inbound("none", nil)); profiles.HTTPStatus(err) != 503 {
		t.Fatalf("no endpoints: %v, want 503", err)
	}
	env.Store.Update(directortest.Specs("127.0.0.1:1001"))
	bad := inbound("bad", nil)
	bad.Body = []byte(`{"model":`)
	if _, err := env.Director.Route(ctx, bad); profiles.HTTPStatus(err) != 400 {
		t.Fatalf("malformed body: %v, want 400", err)
	}
	big := inbound("big", nil)
	big.Body = []byte(`{"model":"` + strings.Repeat("x", 2000) + `"}`)
	if _, err := env.Director.Route(ctx, big); profiles.HTTPStatus(err) != 413 {
		t.Fatalf("oversized body: %v, want 413", err)
	}
	hint := inbound("hint", nil)
	hint.SubsetHint = []string{}
	if _, err := env.Director.Route(ctx, hint); profiles.HTTPStatus(err) != 503 {
		t.Fatalf("empty subset hint: %v, want 503", err)
	}
	hint.SubsetHint = []string{"127.0.0.1:9"}
	if _, err := env.Director.Route(ctx, hint); profiles.HTTPStatus(err) != 503 {
		t.Fatalf("subset hint naming no endpoint: %v, want 503", err)
	}
	if got := requestsTotal(t, env, "503"); got != 3 {
		t.Errorf("spillway_requests_total{code=503} = %v, want 3", got)
	}
	if got := requestsTotal(t, env, "400"); got != 1 {
		t.Errorf("spillway_requests_total{code=400} = %v, want 1", got)
	}
	if c := env.Counter.Get("bad"); c.Dispatch != 0 {
		t.Errorf("a rejected request was dispatched: %+v", c)
	}
}

func TestSubsetHintObeyed(t *testing.T) {
	env := directortest.New(t, 2, director.Options{})
	env.Store.Update(directortest.Specs("127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"))
	env.SetQueue(t, "127.0.0.1:1001", 0) // best overall, but outside the hint
	env.SetQueue(t, "127.0.0.1:1002", 5)
	env.SetQueue(t, "127.0.0.1:1003", 5)
	in := inbound("h", nil)
	in.SubsetHint = []string{"127.0.0.1:1003"}
	x, err := env.Director.Route(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if x.Destination() != "127.0.0.1:1003" {
		t.Fatalf("destination %q, want only the hinted endpoint", x.Destination())
	}
}

func TestLifecycleHooksFireOnceEach(t *testing.T) {
	env := directortest.New(t, 0, director.Options{})
	env.Store.Update(directortest.Specs("127.0.0.1:1001"))
	x, err := env.Director.Route(context.Background(), inbound("life", map[string]string{"x-spillway-debug": "1"}))
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"content-type": "text/event-stream", "x-spillway-prefill-done-ms": "12"}
	x.ResponseHeaders(200, func(k string) string { return hdr[k] })
	x.ResponseHeaders(200, func(k string) string { return hdr[k] })
	x.ResponseBody([]byte("data: {\"choices\":[],\"usa"), false)
	x.ResponseBody([]byte("ge\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\ndata: [DO"), false)
	x.ResponseBody([]byte("NE]\n\n"), true)
	x.ResponseBody(nil, true) // duplicated end of stream
	x.Fail(499, errors.New("late cancel"))
	c := env.Counter.Get("life")
	want := directortest.Counts{Dispatch: 1, FirstChunk: 1, PrefillDone: 1, Finish: 1, Fail: 0,
		Usage:       profiles.Usage{PromptTokens: 7, CompletionTokens: 2, CachedTokens: 4, Reported: true, TTFT: c.Usage.TTFT},
		Destination: "127.0.0.1:1001"}
	if c != want {
		t.Fatalf("hooks %+v, want %+v", c, want)
	}
	if !strings.Contains(x.DebugHeader(), "destination=127.0.0.1:1001") || !strings.Contains(x.DebugHeader(), "decode/decode-filter") {
		t.Errorf("debug header %q lacks the destination or the filter trace", x.DebugHeader())
	}
	if got := requestsTotal(t, env, "200"); got != 1 {
		t.Errorf("spillway_requests_total{code=200} = %v, want 1", got)
	}
	for _, name := range []string{"spillway_ttft_seconds", "spillway_request_duration_seconds"} {
		if n := family(t, env, name).GetMetric()[0].GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("%s: %d samples, want 1", name, n)
		}
	}
}

func TestFailBeforeFirstChunkAndErrorStatus(t *testing.T) {
	env := directortest.New(t, 0, director.Options{})
	env.Store.Update(directortest.Specs("127.0.0.1:1001"))
	x, err := env.Director.Route(context.Background(), inbound("cancel", nil))
	if err != nil {
		t.Fatal(err)
	}
	x.Fail(499, context.Canceled)
	x.Fail(499, context.Canceled)
	x.ResponseBody([]byte("data: x\n"), true)
	if c := env.Counter.Get("cancel"); c.Dispatch != 1 || c.Fail != 1 || c.FirstChunk != 0 || c.Finish != 0 {
		t.Fatalf("cancelled request hooks %+v, want dispatch+fail once", c)
	}
	y, err := env.Director.Route(context.Background(), inbound("e500", nil))
	if err != nil {
		t.Fatal(err)
	}
	y.ResponseHeaders(500, func(string) string { return "" })
	y.ResponseBody([]byte(`{"error":"boom"}`), true)
	if c := env.Counter.Get("e500"); c.Fail != 1 || c.Finish != 0 {
		t.Fatalf("upstream 500 must fail the request, hooks %+v", c)
	}
	if got := errorsTotal(t, env, "499"); got != 1 {
		t.Errorf("spillway_request_errors_total{code=499} = %v, want 1", got)
	}
}

func TestBodyRewriter(t *testing.T) {
	env := directortest.New(t, 0, director.Options{Rewriter: rewriter(`{"rewritten":true}`)})
	env.Store.Update(directortest.Specs("127.0.0.1:1001"))
	x, err := env.Director.Route(context.Background(), inbound("rw", nil))
	if err != nil {
		t.Fatal(err)
	}
	if b, rw := x.Body(); !rw || string(b) != `{"rewritten":true}` {
		t.Fatalf("body %q rewritten=%v", b, rw)
	}
}

type rewriter string

func (r rewriter) Rewrite(*profiles.Request, *profiles.Result) ([]byte, bool, error) {
	return []byte(r), true, nil
}

func TestErrorBodyShape(t *testing.T) {
	got := string(director.ErrorBody(503, `no "ready" endpoint`))
	want := `{"error":{"message":"no \"ready\" endpoint","type":"service_unavailable_error","param":null,"code":503}}`
	if got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

func TestDefaultConfigLoads(t *testing.T) {
	s, err := director.LoadScheduler("", profiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := s.Describe()
	for _, p := range []string{"decode-filter", "queue-scorer", "kv-cache-utilization-scorer", "max-score-picker"} {
		if !strings.Contains(d, p) {
			t.Errorf("default config lacks %s:\n%s", p, d)
		}
	}
}
