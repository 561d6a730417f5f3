package profiles_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/profiles"
)

func ep(i int, labels map[string]string, m *profiles.Metrics) *profiles.Endpoint {
	e := profiles.NewEndpoint(i, fmt.Sprintf("ep%d", i), fmt.Sprintf("10.0.0.%d:8000", i+1), labels)
	if m != nil {
		e.SetMetrics(m)
	}
	return e
}

func newPlugin(t *testing.T, typ, params string) profiles.Plugin {
	t.Helper()
	f, ok := profiles.Lookup(typ)
	if !ok {
		t.Fatalf("%s not registered", typ)
	}
	var raw json.RawMessage
	if params != "" {
		raw = json.RawMessage(params)
	}
	p, err := f(typ, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func score(t *testing.T, typ string, eps []*profiles.Endpoint) []float64 {
	t.Helper()
	out := make([]float64, len(eps))
	newPlugin(t, typ, "").(profiles.Scorer).Score(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, out)
	return out
}

func TestQueueScorer(t *testing.T) {
	eps := []*profiles.Endpoint{
		ep(0, nil, &profiles.Metrics{WaitingQueue: 0}),
		ep(1, nil, &profiles.Metrics{WaitingQueue: 5}),
		ep(2, nil, &profiles.Metrics{WaitingQueue: 10}),
		ep(3, nil, &profiles.Metrics{WaitingQueue: 8}),
	}
	if got := score(t, "queue-scorer", eps); !slices.Equal(got, []float64{1, 0.5, 0, 0.2}) {
		t.Errorf("scores %v, want [1 0.5 0 0.2]", got)
	}
	eq := []*profiles.Endpoint{ep(0, nil, &profiles.Metrics{WaitingQueue: 3}), ep(1, nil, &profiles.Metrics{WaitingQueue: 3})}
	if got := score(t, "queue-scorer", eq); !slices.Equal(got, []float64{1, 1}) {
		t.Errorf("equal queues: %v, want all 1", got)
	}
}

func TestKVCacheUtilizationScorer(t *testing.T) {
	eps := []*profiles.Endpoint{
		ep(0, nil, &profiles.Metrics{KVUsage: 0.25}),
		ep(1, nil, &profiles.Metrics{KVUsage: 1}),
		ep(2, nil, &profiles.Metrics{KVUsage: 0}),
		ep(3, nil, &profiles.Metrics{KVUsage: 1.5}),
		ep(4, nil, &profiles.Metrics{KVUsage: -0.5}),
	}
	if got := score(t, "kv-cache-utilization-scorer", eps); !slices.Equal(got, []float64{0.75, 0, 1, 0, 1}) {
		t.Errorf("scores %v, want [0.75 0 1 0 1]", got)
	}
}

var allRoles = []string{"encode", "prefill", "decode", "both", "prefill-decode", "encode-prefill", "encode-prefill-decode", "", "other"}

func roleEndpoints() []*profiles.Endpoint {
	var eps []*profiles.Endpoint
	for i, r := range allRoles {
		var labels map[string]string
		if r != "" {
			labels = map[string]string{profiles.RoleLabel: r}
		}
		eps = append(eps, ep(i, labels, nil))
	}
	return eps
}

func filterRoles(t *testing.T, typ, params string, eps []*profiles.Endpoint) []string {
	t.Helper()
	got := newPlugin(t, typ, params).(profiles.Filter).Filter(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps)
	var out []string
	for _, e := range got {
		out = append(out, allRoles[e.Index])
	}
	return out
}

// protocols.md §2 role table.
func TestRoleFilters(t *testing.T) {
	for typ, want := range map[string][]string{
		"decode-filter":  {"decode", "both", "prefill-decode", "encode-prefill-decode", ""},
		"prefill-filter": {"prefill", "both", "prefill-decode", "encode-prefill", "encode-prefill-decode"},
		"encode-filter":  {"encode", "encode-prefill", "encode-prefill-decode"},
	} {
		eps := roleEndpoints()
		got := filterRoles(t, typ, "", eps)
		if !slices.Equal(got, want) {
			t.Errorf("%s kept %q, want %q", typ, got, want)
		}
		if len(eps) != len(allRoles) || eps[0].Index != 0 {
			t.Errorf("%s modified its input", typ)
		}
	}
}

func TestLabelSelectorFilter(t *testing.T) {
	eps := []*profiles.Endpoint{
		ep(0, map[string]string{"zone": "a", "tier": "gold"}, nil),
		ep(1, map[string]string{"zone": "b", "tier": "gold"}, nil),
		ep(2, map[string]string{"zone": "a"}, nil),
		ep(3, nil, nil),
	}
	run := func(params string) []int {
		got := newPlugin(t, "label-selector-filter", params).(profiles.Filter).Filter(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps)
		var idx []int
		for _, e := range got {
			idx = append(idx, e.Index)
		}
		return idx
	}
	for _, tc := range []struct {
		params string
		want   []int
	}{
		{`{"matchLabels": {"zone": "a"}}`, []int{0, 2}},
		{`{"matchLabels": {"zone": "a", "tier": "gold"}}`, []int{0}},
		{`{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "c"]}]}`, []int{1}},
		{`{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}`, []int{1, 3}},
		{`{"matchExpressions": [{"key": "tier", "operator": "Exists"}]}`, []int{0, 1}},
		{`{"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}`, []int{2, 3}},
		{`{"matchLabels": {"zone": "a"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}`, []int{2}},
		{`{"matchLabels": {"zone": "z"}}`, nil},
	} {
		if got := run(tc.params); !slices.Equal(got, tc.want) {
			t.Errorf("%s kept %v, want %v", tc.params, got, tc.want)
		}
	}
}

// scheduler builds a one-profile scheduler over eps.
func scheduler(t *testing.T, doc string, eps []*profiles.Endpoint, clock profiles.Clock) *profiles.Scheduler {
	t.Helper()
	s, err := profiles.LoadConfigBytes("test.yaml", []byte(doc), profiles.Options{Endpoints: profiles.EndpointList(eps), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func weights(q, kv float64) string {
	return fmt.Sprintf(head+`plugins:
- type: decode-filter
- type: queue-scorer
- type: kv-cache-utilization-scorer
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer, weight: %g}, {pluginRef: kv-cache-utilization-scorer, weight: %g}]
`, q, kv)
}

func TestScheduleWeightedSum(t *testing.T) {
	eps := []*profiles.Endpoint{
		ep(0, nil, &profiles.Metrics{WaitingQueue: 0, KVUsage: 0.9}),  // queue 1, kv 0.1
		ep(1, nil, &profiles.Metrics{WaitingQueue: 10, KVUsage: 0.0}), // queue 0, kv 1
		ep(2, map[string]string{profiles.RoleLabel: "prefill"}, &profiles.Metrics{}),
	}
	for _, tc := range []struct {
		q, kv float64
		want  string
	}{{1, 3, "ep1"}, {3, 1, "ep0"}} {
		s := scheduler(t, weights(tc.q, tc.kv), eps, nil)
		res, err := s.Schedule(context.Background(), &profiles.Request{})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Target("decode"); got == nil || got.Name != tc.want {
			t.Errorf("weights q=%g kv=%g picked %v, want %s", tc.q, tc.kv, got, tc.want)
		}
		if res.Primary != "decode" || res.DestinationValue() != res.Target("decode").Address {
			t.Errorf("destination %q primary %q", res.DestinationValue(), res.Primary)
		}
		if c := res.Profiles["decode"].Candidates; c != 2 {
			t.Errorf("candidates after the decode filter = %d, want 2", c)
		}
	}
}

func TestScheduleNoEndpoints(t *testing.T) {
	s := scheduler(t, weights(1, 1), nil, nil)
	_, err := s.Schedule(context.Background(), &profiles.Request{})
	if profiles.HTTPStatus(err) != http.StatusServiceUnavailable {
		t.Fatalf("no endpoints: %v", err)
	}
	// Every endpoint filtered out is a 503 too.
	s = scheduler(t, weights(1, 1), []*profiles.Endpoint{ep(0, map[string]string{profiles.RoleLabel: "encode"}, nil)}, nil)
	_, err = s.Schedule(context.Background(), &profiles.Request{})
	if profiles.HTTPStatus(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "decode-filter") {
		t.Fatalf("all filtered: %v", err)
	}
}

func TestScheduleSubsetHint(t *testing.T) {
	eps := []*profiles.Endpoint{
		ep(0, nil, &profiles.Metrics{WaitingQueue: 0}),
		ep(1, nil, &profiles.Metrics{WaitingQueue: 5}),
		ep(2, nil, &profiles.Metrics{WaitingQueue: 9}),
	}
	s := scheduler(t, weights(1, 0), eps, nil)
	res, err := s.Schedule(context.Background(), &profiles.Request{SubsetHint: []string{eps[1].Address, eps[2].Address}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Target("decode"); got != eps[1] {
		t.Fatalf("subset hint ignored: picked %v", got)
	}
	for _, hint := range [][]string{{}, {"10.9.9.9:1"}} {
		_, err = s.Schedule(context.Background(), &profiles.Request{SubsetHint: hint})
		if profiles.HTTPStatus(err) != http.StatusServiceUnavailable {
			t.Fatalf("hint %v: %v", hint, err)
		}
	}
}

// fakeHooks records lifecycle calls. It is built by the registry like any
// plugin, so the scheduler collects its hooks.
type fakeHooks struct {
	profiles.Named
	dispatch, first, prefill, finish, fail atomic.Int32
	mu                                     sync.Mutex
	usage                                  profiles.Usage
	order                                  []string
	// inFirst, when set, is closed once OnFirstChunk has started, and
	// OnFirstChunk then waits for releaseFirst.
	inFirst, releaseFirst chan struct{}
}

func (f *fakeHooks) note(s string) { f.mu.Lock(); f.order = append(f.order, s); f.mu.Unlock() }
func (f *fakeHooks) OnDispatch(*profiles.Request, *profiles.Result) {
	f.dispatch.Add(1)
	f.note("dispatch")
}
func (f *fakeHooks) OnFirstChunk(*profiles.Request, *profiles.Result) {
	if f.inFirst != nil {
		close(f.inFirst)
		<-f.releaseFirst
	}
	f.first.Add(1)
	f.note("first")
}
func (f *fakeHooks) OnPrefillDone(*profiles.Request, *profiles.Result) {
	f.prefill.Add(1)
	f.note("prefill")
}
func (f *fakeHooks) OnFinish(_ *profiles.Request, _ *profiles.Result, u profiles.Usage) {
	f.finish.Add(1)
	f.mu.Lock()
	f.usage = u
	f.mu.Unlock()
	f.note("finish")
}
func (f *fakeHooks) OnFail(*profiles.Request, *profiles.Result, error) { f.fail.Add(1); f.note("fail") }

func init() {
	profiles.Register("fake-hooks", func(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
		return &fakeHooks{Named: profiles.NewNamed("fake-hooks", name)}, nil
	})
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func hookScheduler(t *testing.T, clock profiles.Clock) (*profiles.Scheduler, *fakeHooks) {
	t.Helper()
	s := scheduler(t, head+`plugins:
- type: fake-hooks
  name: hooks
- type: random-picker
schedulingProfiles:
- name: p
  plugins: [{pluginRef: random-picker}]
`, []*profiles.Endpoint{ep(0, nil, nil)}, clock)
	p, ok := s.Plugin("hooks")
	if !ok {
		t.Fatal("hooks plugin missing")
	}
	return s, p.(*fakeHooks)
}

func track(t *testing.T, s *profiles.Scheduler) *profiles.Tracker {
	t.Helper()
	req := &profiles.Request{}
	res, err := s.Schedule(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return s.Dispatch(req, res)
}

func TestTrackerFinishAfterFailIsNoop(t *testing.T) {
	s, h := hookScheduler(t, nil)
	tr := track(t, s)
	tr.Fail(errors.New("client went away"))
	tr.Finish(profiles.Usage{})
	tr.FirstChunk()
	tr.PrefillDone()
	tr.Fail(errors.New("again"))
	if got := fmt.Sprint(h.order); got != "[dispatch fail]" {
		t.Fatalf("hooks %s, want [dispatch fail]", got)
	}
	if !tr.Done() {
		t.Fatal("not done after Fail")
	}
}

func TestTrackerFinishImpliesEarlierHooks(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s, h := hookScheduler(t, clock)
	tr := track(t, s)
	tr.Finish(profiles.Usage{PromptTokens: 10, Reported: true})
	tr.Finish(profiles.Usage{})
	tr.Fail(errors.New("late"))
	if got := fmt.Sprint(h.order); got != "[dispatch prefill first finish]" {
		t.Fatalf("hooks %s", got)
	}
	if h.usage.PromptTokens != 10 || !h.usage.Reported {
		t.Fatalf("usage %+v", h.usage)
	}

	// TTFT comes from the clock when the first chunk was seen.
	h2tr := track(t, s)
	clock.advance(250 * time.Millisecond)
	h2tr.FirstChunk()
	h2tr.FirstChunk()
	clock.advance(time.Second)
	h2tr.Finish(profiles.Usage{})
	if h.usage.TTFT != 250*time.Millisecond {
		t.Fatalf("TTFT %v, want 250ms", h.usage.TTFT)
	}
	if h.first.Load() != 2 || h.finish.Load() != 2 || h.dispatch.Load() != 2 {
		t.Fatalf("counts first=%d finish=%d dispatch=%d", h.first.Load(), h.finish.Load(), h.dispatch.Load())
	}
}

func TestTrackerConcurrentExactlyOnce(t *testing.T) {
	s, h := hookScheduler(t, nil)
	const requests, callers = 100, 8
	var finished, failed int32
	for range requests {
		tr := track(t, s)
		f0, x0 := h.finish.Load(), h.fail.Load()
		p0, c0 := h.prefill.Load(), h.first.Load()
		var wg sync.WaitGroup
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for range 4 {
					switch r.IntN(4) {
					case 0:
						tr.FirstChunk()
					case 1:
						tr.PrefillDone()
					case 2:
						tr.Finish(profiles.Usage{})
					case 3:
						tr.Fail(errors.New("x"))
					}
				}
			}()
		}
		wg.Wait()
		tr.Finish(profiles.Usage{}) // make sure every request ends
		df, dx := h.finish.Load()-f0, h.fail.Load()-x0
		dp, dc := h.prefill.Load()-p0, h.first.Load()-c0
		if df+dx != 1 {
			t.Fatalf("finish=%d fail=%d: want exactly one end", df, dx)
		}
		if dp > 1 || dc > 1 {
			t.Fatalf("prefill=%d first=%d fired more than once", dp, dc)
		}
		if df == 1 && (dp != 1 || dc != 1) {
			t.Fatalf("finished without prefill=%d/first=%d", dp, dc)
		}
		finished += df
		failed += dx
	}
	if h.dispatch.Load() != requests {
		t.Fatalf("dispatch = %d", h.dispatch.Load())
	}
	t.Logf("finished %d, failed %d", finished, failed)
}

func TestParseRequestChat(t *testing.T) {
	body := `{"model":"qwen","stream":true,"stream_options":{"include_usage":true},"max_tokens":200,"max_completion_tokens":100,
	"cache_salt":"s1","tools":[{"type":"function"}],
	"messages":[{"role":"system","content":"be brief"},
	{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"text","text":"and this"},
	{"type":"input_audio","input_audio":{"data":"UklG","format":"wav"}},{"type":"video_url","video_url":{"url":"https://x/v.mp4"}}]},
	{"role":"assistant","content":null}]}`
	r, err := profiles.ParseRequest("/v1/chat/completions?x=1", map[string]string{"x-request-id": "rid-1"}, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Path != profiles.PathChatCompletions || r.ID != "rid-1" || r.Model != "qwen" || !r.Stream || !r.IncludeUsage || r.MaxTokens != 100 || r.CacheSalt != "s1" || len(r.Tools) == 0 {
		t.Errorf("fields: %+v", r)
	}
	if len(r.Messages) != 3 || r.Messages[0].Text != "be brief" || r.Messages[1].Text != "what is this?\nand this" || r.Messages[2].Text != "" {
		t.Errorf("messages %+v", r.Messages)
	}
	if len(r.Multimodal) != 3 || !r.HasMultimodal() {
		t.Fatalf("multimodal %+v", r.Multimodal)
	}
	if m := r.Multimodal[0]; m.Kind != profiles.KindImage || m.URL != "data:image/png;base64,AAAA" || m.Message != 1 {
		t.Errorf("image %+v", m)
	}
	if m := r.Multimodal[1]; m.Kind != profiles.KindAudio || m.Format != "wav" || m.URL != "UklG" {
		t.Errorf("audio %+v", m)
	}
	if m := r.Multimodal[2]; m.Kind != profiles.KindVideo || m.URL != "https://x/v.mp4" {
		t.Errorf("video %+v", m)
	}
	if got := r.PromptText(); got != "system\nbe brief\nuser\nwhat is this?\nand this\nassistant\n\n" {
		t.Errorf("PromptText %q", got)
	}
}

func TestParseRequestCompletions(t *testing.T) {
	for _, tc := range []struct {
		prompt string
		text   string
		ids    []uint32
	}{
		{`"hello"`, "hello", nil},
		{`["a","b"]`, "a\nb", nil},
		{`[1,2,3]`, "", []uint32{1, 2, 3}},
		{`[[1,2],[3]]`, "", []uint32{1, 2, 3}},
	} {
		r, err := profiles.ParseRequest(profiles.PathCompletions, nil, []byte(`{"model":"m","prompt":`+tc.prompt+`,"max_tokens":5}`))
		if err != nil {
			t.Fatalf("%s: %v", tc.prompt, err)
		}
		if r.Prompt != tc.text || !slices.Equal(r.PromptIDs, tc.ids) || r.MaxTokens != 5 || r.PromptText() != tc.text {
			t.Errorf("%s: prompt %q ids %v max %d", tc.prompt, r.Prompt, r.PromptIDs, r.MaxTokens)
		}
	}
}

func TestParseRequestResponses(t *testing.T) {
	r, err := profiles.ParseRequest(profiles.PathResponses, nil, []byte(`{"model":"m","instructions":"sys","input":"hi","max_output_tokens":7}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != 2 || r.Messages[0].Role != "system" || r.Messages[0].Text != "sys" || r.Messages[1].Text != "hi" || r.MaxTokens != 7 {
		t.Errorf("string input: %+v", r)
	}
	r, err = profiles.ParseRequest(profiles.PathResponses, nil, []byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"https://x/a.png"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != 1 || r.Messages[0].Text != "look" || len(r.Multimodal) != 1 || r.Multimodal[0].URL != "https://x/a.png" || r.Multimodal[0].Message != 0 {
		t.Errorf("item input: %+v %+v", r.Messages, r.Multimodal)
	}
}

func TestParseRequestEmptyBody(t *testing.T) {
	r, err := profiles.ParseRequest("/v1/models", nil, nil)
	if err != nil || r.Path != "/v1/models" {
		t.Fatalf("empty body: %v %+v", err, r)
	}
}

func TestParseRequestMalformed(t *testing.T) {
	for name, body := range map[string]string{
		"not json":           `{"model":`,
		"not an object":      `["a"]`,
		"string body":        `"hi"`,
		"wrong field type":   `{"model": 3}`,
		"content number":     `{"messages":[{"role":"user","content":3}]}`,
		"unknown part":       `{"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`,
		"image without url":  `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`,
		"audio without data": `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`,
		"negative max":       `{"max_tokens":-1}`,
		"bad prompt":         `{"prompt":{"a":1}}`,
		"bad token id":       `{"prompt":[-5]}`,
		"bad input":          `{"input":5}`,
		"trailing garbage":   `{"model":"m"} x`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := profiles.ParseRequest(profiles.PathChatCompletions, nil, []byte(body))
			var se *profiles.StatusError
			if !errors.As(err, &se) || se.Code != http.StatusBadRequest {
				t.Fatalf("got %v, want a 400 StatusError", err)
			}
			if profiles.HTTPStatus(err) != 400 || profiles.ClientMessage(err) == "" {
				t.Fatalf("status %d message %q", profiles.HTTPStatus(err), profiles.ClientMessage(err))
			}
		})
	}
}

// A producer that releases prefill tokens at the first chunk and the rest at
// the end relies on OnFirstChunk completing before OnFinish starts, even
// when the gateway's response goroutine and its cancellation path race.
func TestTrackerHooksDoNotOverlap(t *testing.T) {
	s, h := hookScheduler(t, nil)
	tr := track(t, s)
	h.inFirst, h.releaseFirst = make(chan struct{}), make(chan struct{})
	go tr.FirstChunk()
	<-h.inFirst
	finished := make(chan struct{})
	go func() { tr.Finish(profiles.Usage{}); close(finished) }()
	// Finish must wait for OnFirstChunk; give it every chance to run ahead.
	for range 100 {
		runtime.Gosched()
	}
	h.mu.Lock()
	order := fmt.Sprint(h.order)
	h.mu.Unlock()
	close(h.releaseFirst)
	<-finished
	if strings.Contains(order, "finish") {
		t.Fatalf("OnFinish ran while OnFirstChunk was still running: %s", order)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := fmt.Sprint(h.order); got != "[dispatch prefill first finish]" && got != "[dispatch first prefill finish]" {
		t.Fatalf("hooks %s", got)
	}
}

// Benchmarks and the simulator seed every Seeder in Plugins() to repeat a
// run exactly; the max-score-picker a profile gets by default must be
// reachable too.
func TestImpliedPickerIsSeedable(t *testing.T) {
	doc := head + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: p\n  plugins: [{pluginRef: queue-scorer}]\n"
	eps := endpoints(4) // no metrics: all queues equal, every score ties
	run := func() string {
		s := scheduler(t, doc, eps, nil)
		for _, p := range s.Plugins() {
			if sd, ok := p.(profiles.Seeder); ok {
				sd.Seed(123)
			}
		}
		var picks []int
		for range 40 {
			res, err := s.Schedule(context.Background(), &profiles.Request{})
			if err != nil {
				t.Fatal(err)
			}
			picks = append(picks, res.Target("p").Index)
		}
		return fmt.Sprint(picks)
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("same seed, different picks:\n%s\n%s", a, b)
	}
}
