package profiles_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	_ "github.com/spillway-llm/spillway/decode"
	_ "github.com/spillway-llm/spillway/encode"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// The prefix-based decider learns the decode endpoint's cached tokens from
// the prefill package's index.
func init() { profiles.RegisterPrefixMatch(prefill.MatchOf) }

// pool builds endpoints with roles: n of each given role.
func pool(roles map[string]int) profiles.EndpointList {
	var eps profiles.EndpointList
	i := 0
	for _, role := range []string{profiles.RoleDecode, profiles.RolePrefill, profiles.RoleEncode} {
		for j := 0; j < roles[role]; j++ {
			eps = append(eps, profiles.NewEndpoint(i, fmt.Sprintf("%s-%d", role, j), fmt.Sprintf("10.0.%d.%d:8000", i/250, i%250+1),
				map[string]string{profiles.RoleLabel: role}))
			i++
		}
	}
	return eps
}

func roleOf(eps profiles.EndpointList, addr string) string {
	for _, e := range eps {
		if e.Address == addr {
			return e.Role
		}
	}
	return "?"
}

// registered returns the plugin types among want that are linked into this
// test binary, so that configs grow with the packages that exist.
func registered(types ...string) bool {
	for _, t := range types {
		if _, ok := profiles.Lookup(t); !ok {
			return false
		}
	}
	return true
}

// pdConfig is the llm-d pd-disaggregation guide's shape: a prefill profile
// (prefill-filter + prefix-cache-affinity-filter + token-load-scorer when
// package prefill is linked, else a queue scorer) and a decode profile
// (decode-filter + active-request-scorer) under disagg-profile-handler with
// the prefix-based decider.
func pdConfig() string {
	prefillPlugins := "- type: queue-scorer\n"
	prefillProfile := "  - pluginRef: queue-scorer\n"
	if registered("approx-prefix-cache-producer", "inflight-load-producer", "prefix-cache-affinity-filter", "token-load-scorer") {
		prefillPlugins = "- type: approx-prefix-cache-producer\n  parameters: {blockSizeTokens: 64}\n- type: inflight-load-producer\n" +
			"- type: prefix-cache-affinity-filter\n  parameters: {peakPrefillThroughput: 15751, affinityThreshold: 0.6, maxTTFTPenaltyMs: 36000}\n- type: token-load-scorer\n"
		prefillProfile = "  - pluginRef: prefix-cache-affinity-filter\n  - pluginRef: token-load-scorer\n    weight: 1\n"
	}
	return `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
` + prefillPlugins + `- type: active-request-scorer
  parameters: {idleThreshold: 0, maxBusyScore: 1.0}
- type: max-score-picker
- type: prefix-based-pd-decider
  parameters: {nonCachedTokens: 256, promptTokens: 512}
- type: disagg-profile-handler
  parameters:
    deciders: {prefill: prefix-based-pd-decider}
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
` + prefillProfile + `  - pluginRef: max-score-picker
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: active-request-scorer
    weight: 1
  - pluginRef: max-score-picker
`
}

// epdConfig adds the encode stage (protocols.md §6 shape, llm-d E-P-D guide).
func epdConfig() string {
	c := strings.Replace(pdConfig(), "- type: disagg-profile-handler\n  parameters:\n    deciders: {prefill: prefix-based-pd-decider}\n",
		`- type: encode-filter
- type: encode-queue-scorer
- type: mm-embeddings-cache-producer
  parameters: {cacheSizeInMBPerServer: 512}
- type: mm-embeddings-cache-scorer
- type: always-disagg-multimodal-decider
- type: disagg-profile-handler
  parameters:
    stageOrder: decode-first
    profiles: {decode: decode, prefill: prefill, encode: encode}
    deciders: {prefill: prefix-based-pd-decider, encode: always-disagg-multimodal-decider}
`, 1)
	return c + `- name: encode
  plugins:
  - pluginRef: encode-filter
  - pluginRef: encode-queue-scorer
    weight: 1
  - pluginRef: mm-embeddings-cache-scorer
    weight: 2
  - pluginRef: max-score-picker
`
}

func loadDisagg(t *testing.T, cfg string, eps profiles.EndpointList) (*profiles.Scheduler, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := profiles.LoadConfigBytes("test.yaml", []byte(cfg), profiles.Options{Endpoints: eps, Registerer: reg})
	if err != nil {
		t.Fatalf("config does not load: %v\n%s", err, cfg)
	}
	t.Cleanup(s.Close)
	return s, reg
}

func chat(t *testing.T, words int, images ...string) *profiles.Request {
	t.Helper()
	return chatText(t, strings.Repeat("word ", words), images...)
}

func chatText(t *testing.T, text string, images ...string) *profiles.Request {
	t.Helper()
	content := `"` + text + `"`
	if len(images) > 0 {
		parts := []string{`{"type":"text","text":` + content + `}`}
		for _, u := range images {
			parts = append(parts, `{"type":"image_url","image_url":{"url":"`+u+`"}}`)
		}
		content = "[" + strings.Join(parts, ",") + "]"
	}
	req, err := profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{},
		[]byte(`{"model":"m","messages":[{"role":"user","content":`+content+`}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func decisions(t *testing.T, reg *prometheus.Registry, typ, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "spillway_disagg_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["decision_type"] == typ && l["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestPDConfigRoutes(t *testing.T) {
	eps := pool(map[string]int{profiles.RoleDecode: 2, profiles.RolePrefill: 2})
	s, reg := loadDisagg(t, pdConfig(), eps)
	ctx := context.Background()

	long := chat(t, 1000) // ≈1250 tokens ≥ promptTokens 512
	res, err := s.Schedule(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != profiles.DecisionPrefillDecode || res.Reason != profiles.ReasonNone {
		t.Errorf("long prompt: decision %s/%s, want prefill-decode/none", res.Decision, res.Reason)
	}
	if r := roleOf(eps, res.DestinationValue()); r != profiles.RoleDecode {
		t.Errorf("destination %s has role %s, want decode", res.DestinationValue(), r)
	}
	if r := roleOf(eps, res.Headers[profiles.HeaderPrefillerHostPort]); r != profiles.RolePrefill {
		t.Errorf("x-prefiller-host-port %q has role %s, want prefill", res.Headers[profiles.HeaderPrefillerHostPort], r)
	}
	if _, ok := res.Headers[profiles.HeaderEncoderHostsPorts]; ok {
		t.Error("encoder header in a P/D config")
	}

	short := chat(t, 10)
	res2, err := s.Schedule(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Decision != profiles.DecisionDecodeOnly || res2.Reason != profiles.ReasonInputTooShort {
		t.Errorf("short prompt: %s/%s, want decode-only/input_too_short", res2.Decision, res2.Reason)
	}
	if _, ok := res2.Headers[profiles.HeaderPrefillerHostPort]; ok {
		t.Error("prefiller header on a decode-only decision")
	}
	if got := decisions(t, reg, "prefill-decode", "none"); got != 1 {
		t.Errorf("spillway_disagg_decisions_total{prefill-decode,none} = %v, want 1", got)
	}
	if got := decisions(t, reg, "decode-only", "input_too_short"); got != 1 {
		t.Errorf("spillway_disagg_decisions_total{decode-only,input_too_short} = %v, want 1", got)
	}

	// active-request-scorer: a dispatched request makes its decode
	// endpoint busy, so the next request goes to the other one; finishing
	// releases it.
	tr := s.Dispatch(long, res)
	first := res.DestinationValue()
	for range 5 {
		r3, err := s.Schedule(ctx, chat(t, 10))
		if err != nil {
			t.Fatal(err)
		}
		if r3.DestinationValue() == first {
			t.Fatalf("decode pick %s is busy with a dispatched request, the idle endpoint must win", first)
		}
	}
	tr.Finish(profiles.Usage{})
	seen := map[string]bool{}
	for range 40 {
		r4, _ := s.Schedule(ctx, chat(t, 10))
		seen[r4.DestinationValue()] = true
	}
	if !seen[first] {
		t.Error("after Finish the endpoint never won again: the in-flight count leaked")
	}
}

func TestPDNoPrefillEndpoint(t *testing.T) {
	eps := pool(map[string]int{profiles.RoleDecode: 2})
	s, reg := loadDisagg(t, pdConfig(), eps)
	res, err := s.Schedule(context.Background(), chat(t, 1000))
	if err != nil {
		t.Fatalf("no prefill pod must still serve decode-only: %v", err)
	}
	if res.Decision != profiles.DecisionDecodeOnly || res.Reason != profiles.ReasonNoPrefillEndpoint {
		t.Errorf("%s/%s, want decode-only/no_prefill_endpoint", res.Decision, res.Reason)
	}
	if decisions(t, reg, "decode-only", "no_prefill_endpoint") != 1 {
		t.Error("not counted")
	}
	// No decode endpoint: the request fails (decode is the destination).
	s2, _ := loadDisagg(t, pdConfig(), pool(map[string]int{profiles.RolePrefill: 2}))
	if _, err := s2.Schedule(context.Background(), chat(t, 1000)); profiles.HTTPStatus(err) != 503 {
		t.Errorf("no decode endpoint: err %v, want 503", err)
	}
}

func TestEPDConfigRoutes(t *testing.T) {
	eps := pool(map[string]int{profiles.RoleDecode: 2, profiles.RolePrefill: 2, profiles.RoleEncode: 2})
	s, reg := loadDisagg(t, epdConfig(), eps)
	ctx := context.Background()
	req := chat(t, 1000, "http://img/a.png", "http://img/b.png")
	res, err := s.Schedule(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != profiles.DecisionEncodePrefillDecode || res.Reason != profiles.ReasonNone {
		t.Fatalf("%s/%s, want encode-prefill-decode/none", res.Decision, res.Reason)
	}
	encs := strings.Split(res.Headers[profiles.HeaderEncoderHostsPorts], ",")
	if len(encs) != 2 {
		t.Fatalf("x-encoder-hosts-ports %q: want one encoder per image", res.Headers[profiles.HeaderEncoderHostsPorts])
	}
	for _, e := range encs {
		if roleOf(eps, e) != profiles.RoleEncode {
			t.Errorf("encoder %s is not an encode pod", e)
		}
	}
	if encs[0] == encs[1] {
		t.Errorf("both images on %s although the other encoder is idle", encs[0])
	}
	if roleOf(eps, res.Headers[profiles.HeaderPrefillerHostPort]) != profiles.RolePrefill || roleOf(eps, res.DestinationValue()) != profiles.RoleDecode {
		t.Errorf("headers %v destination %s", res.Headers, res.DestinationValue())
	}
	s.Dispatch(req, res).Finish(profiles.Usage{})

	// Encoder-cache affinity: the same image goes back to the encoder that
	// encoded it (weight 2 beats an equal queue).
	for i := range 10 {
		// A fresh prompt each time, so that no decode endpoint caches it.
		again, err := s.Schedule(ctx, chatText(t, fmt.Sprintf("q%d ", i)+strings.Repeat("word ", 1000), "http://img/b.png"))
		if err != nil {
			t.Fatal(err)
		}
		if got := again.Headers[profiles.HeaderEncoderHostsPorts]; got != encs[1] {
			t.Fatalf("image b served by %s, went to %s: encoder-cache affinity lost", encs[1], got)
		}
	}

	// Text-only request in an E-P-D pool.
	txt, _ := s.Schedule(ctx, chatText(t, "fresh "+strings.Repeat("word ", 1000)))
	if txt.Decision != profiles.DecisionPrefillDecode || txt.Reason != profiles.ReasonNotMultimodal {
		t.Errorf("text: %s/%s, want prefill-decode/not_multimodal", txt.Decision, txt.Reason)
	}
	// Short image request: encode-decode.
	sh, _ := s.Schedule(ctx, chat(t, 5, "http://img/c.png"))
	if sh.Decision != profiles.DecisionEncodeDecode || sh.Reason != profiles.ReasonInputTooShort {
		t.Errorf("short image: %s/%s, want encode-decode/input_too_short", sh.Decision, sh.Reason)
	}
	if decisions(t, reg, "encode-prefill-decode", "none") != 11 {
		t.Errorf("counter: %v", decisions(t, reg, "encode-prefill-decode", "none"))
	}

	// No encoders: the request still goes prefill-decode.
	s2, _ := loadDisagg(t, epdConfig(), pool(map[string]int{profiles.RoleDecode: 1, profiles.RolePrefill: 1}))
	ne, err := s2.Schedule(ctx, chat(t, 1000, "http://img/a.png"))
	if err != nil {
		t.Fatal(err)
	}
	if ne.Decision != profiles.DecisionPrefillDecode || ne.Reason != profiles.ReasonNoEncoder {
		t.Errorf("no encoder: %s/%s, want prefill-decode/no_encoder", ne.Decision, ne.Reason)
	}
}

func TestDisaggPrefillFirst(t *testing.T) {
	cfg := strings.Replace(pdConfig(), "deciders: {prefill: prefix-based-pd-decider}", "stageOrder: prefill-first\n    deciders: {prefill: prefix-based-pd-decider}", 1)
	eps := pool(map[string]int{profiles.RoleDecode: 1, profiles.RolePrefill: 1})
	s, _ := loadDisagg(t, cfg, eps)
	res, err := s.Schedule(context.Background(), chat(t, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != profiles.DecisionPrefillDecode || res.Primary != "decode" || roleOf(eps, res.DestinationValue()) != profiles.RoleDecode {
		t.Errorf("prefill-first: %s primary %s dest %s", res.Decision, res.Primary, res.DestinationValue())
	}
}

func TestDisaggConfigErrors(t *testing.T) {
	eps := pool(map[string]int{profiles.RoleDecode: 1})
	for _, tc := range []struct{ from, to, want string }{
		{"deciders: {prefill: prefix-based-pd-decider}", "deciders: {prefill: nope}", `deciders.prefill "nope" names no plugin`},
		{"deciders: {prefill: prefix-based-pd-decider}", "deciders: {prefill: decode-filter}", "is not a decider"},
		{"deciders: {prefill: prefix-based-pd-decider}", "stageOrder: sideways", "stageOrder"},
		{"deciders: {prefill: prefix-based-pd-decider}", "bogus: 1", "unknown parameter"},
		{"nonCachedTokens: 256", "nonCachedTokens: -1", "nonCachedTokens must be"},
		{"idleThreshold: 0", "idleThreshold: -2", "idleThreshold"},
	} {
		cfg := strings.Replace(pdConfig(), tc.from, tc.to, 1)
		_, err := profiles.LoadConfigBytes("bad.yaml", []byte(cfg), profiles.Options{Endpoints: eps})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to mention %q", tc.to, err, tc.want)
		}
	}
	// A decode profile name that does not exist is a 500 at schedule time.
	cfg := strings.Replace(pdConfig(), "deciders: {prefill: prefix-based-pd-decider}", "profiles: {decode: dec}", 1)
	s, err := profiles.LoadConfigBytes("x.yaml", []byte(cfg), profiles.Options{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Schedule(context.Background(), chat(t, 5)); profiles.HTTPStatus(err) != 500 || !strings.Contains(err.Error(), `"dec"`) {
		t.Errorf("err %v", err)
	}
}

// fakeMatcher is a FakePrefixMatcher plugin for the decider tests.
type fakeMatcher struct {
	profiles.Named
	cached int
}

func (f *fakeMatcher) MatchOf(*profiles.Request, *profiles.Endpoint) (int, int, int) {
	return f.cached / 16, 100, f.cached
}

func TestPrefixBasedDeciderFakeMatcher(t *testing.T) {
	if !registered("fake-prefix-matcher-for-test") { // -count > 1 reruns the test
		profiles.Register("fake-prefix-matcher-for-test", func(name string, _ json.RawMessage, _ profiles.Handle) (profiles.Plugin, error) {
			return &fakeMatcher{Named: profiles.NewNamed("fake-prefix-matcher-for-test", name), cached: 1200}, nil
		})
	}
	cfg := strings.Replace(pdConfig(), "- type: max-score-picker\n", "- type: max-score-picker\n- type: fake-prefix-matcher-for-test\n  name: pm\n", 1)
	cfg = strings.Replace(cfg, "promptTokens: 512}", "promptTokens: 512, prefixPluginName: pm}", 1)
	s, reg := loadDisagg(t, cfg, pool(map[string]int{profiles.RoleDecode: 1, profiles.RolePrefill: 1}))
	// ≈1250 prompt tokens, 1200 cached on decode: 50 < nonCachedTokens 256.
	res, err := s.Schedule(context.Background(), chat(t, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != profiles.DecisionDecodeOnly || res.Reason != profiles.ReasonSuffixCached {
		t.Errorf("%s/%s, want decode-only/suffix_cached", res.Decision, res.Reason)
	}
	if seriesCount(t, reg, "spillway_disagg_decisions_total") != 28 {
		t.Error("every decision_type × reason series should be pre-created")
	}
	// prefixPluginName naming a non-matcher is a config error.
	bad := strings.Replace(cfg, "prefixPluginName: pm", "prefixPluginName: decode-filter", 1)
	if _, err := profiles.LoadConfigBytes("b.yaml", []byte(bad), profiles.Options{}); err == nil || !strings.Contains(err.Error(), "does not report prefix matches") {
		t.Errorf("err %v", err)
	}
}

func TestPromptTokens(t *testing.T) {
	r := chat(t, 100) // "word " × 100 = 500 bytes + "user"
	if got := profiles.PromptTokens(r); got != 126 {
		t.Errorf("estimate %d, want 126", got)
	}
	r.Tokens = profiles.TokenCounts{Text: 90, Image: 10, Counted: true}
	if got := profiles.PromptTokens(r); got != 100 {
		t.Errorf("counted %d, want 100", got)
	}
}

func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// With the prefill package's index, a prompt the decode endpoint already
// caches is decoded there without a remote prefill.
func TestPrefixBasedDeciderUsesPrefixIndex(t *testing.T) {
	if !registered("approx-prefix-cache-producer") {
		t.Skip("approx-prefix-cache-producer not registered")
	}
	s, _ := loadDisagg(t, pdConfig(), pool(map[string]int{profiles.RoleDecode: 1, profiles.RolePrefill: 1}))
	ctx := context.Background()
	first := chat(t, 2000)
	res, err := s.Schedule(ctx, first)
	if err != nil || res.Decision != profiles.DecisionPrefillDecode {
		t.Fatalf("first: %v %+v", err, res)
	}
	s.Dispatch(first, res).Finish(profiles.Usage{})
	again, err := s.Schedule(ctx, chat(t, 2000))
	if err != nil {
		t.Fatal(err)
	}
	if again.Decision != profiles.DecisionDecodeOnly || again.Reason != profiles.ReasonSuffixCached {
		t.Errorf("repeat: %s/%s, want decode-only/suffix_cached", again.Decision, again.Reason)
	}
}

// fakeTokenProducer stands in for package tokenproducer's token-producer
// while that package is not linked into this test binary.
type fakeTokenProducer struct{ profiles.Named }

func (fakeTokenProducer) Produce(_ context.Context, req *profiles.Request, _ []*profiles.Endpoint) error {
	req.Tokens.Text, req.Tokens.Counted = profiles.PromptTokens(req), true
	return nil
}

func (fakeTokenProducer) Order() int { return 10 }

// The shipped guides' picker configs (deploy/guides/*/picker-config.yaml)
// load unchanged and route as their comments describe. When package
// tokenproducer is not linked, a Fake token-producer is registered.
func TestGuideConfigsRouteFakeTokenProducerWhenAbsent(t *testing.T) {
	if !registered("token-producer") {
		profiles.Register("token-producer", func(name string, _ json.RawMessage, _ profiles.Handle) (profiles.Plugin, error) {
			return fakeTokenProducer{profiles.NewNamed("token-producer", name)}, nil
		})
	}
	for _, tc := range []struct {
		guide string
		pool  map[string]int
		req   func() *profiles.Request
		want  string
	}{
		{"pd-disaggregation", map[string]int{profiles.RoleDecode: 2, profiles.RolePrefill: 2}, func() *profiles.Request { return chat(t, 2000) }, profiles.DecisionPrefillDecode},
		{"e-p-d-disaggregation", map[string]int{profiles.RoleDecode: 2, profiles.RolePrefill: 2, profiles.RoleEncode: 2},
			func() *profiles.Request { return chat(t, 50, "http://img/a.png", "http://img/b.png") }, profiles.DecisionEncodePrefillDecode},
	} {
		t.Run(tc.guide, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "deploy", "guides", tc.guide, "picker-config.yaml"))
			if err != nil {
				t.Skipf("guide not present: %v", err)
			}
			var cm struct {
				Data map[string]string `json:"data"`
			}
			if err := yaml.Unmarshal(raw, &cm); err != nil {
				t.Fatal(err)
			}
			cfg := cm.Data["config.yaml"]
			c, err := profiles.ParseConfig(tc.guide, []byte(cfg))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range c.Plugins {
				if !registered(p.Type) {
					t.Skipf("plugin type %s is not linked into this test binary yet", p.Type)
				}
			}
			eps := pool(tc.pool)
			s, _ := loadDisagg(t, cfg, eps)
			res, err := s.Schedule(context.Background(), tc.req())
			if err != nil {
				t.Fatal(err)
			}
			if res.Decision != tc.want || roleOf(eps, res.DestinationValue()) != profiles.RoleDecode {
				t.Errorf("decision %s/%s destination %s, want %s on a decode pod", res.Decision, res.Reason, res.DestinationValue(), tc.want)
			}
		})
	}
}

// The complete config example of docs/disaggregation.md loads as written.
func TestDisaggregationDocExampleLoads(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "docs", "disaggregation.md"))
	if err != nil {
		t.Skipf("docs not present: %v", err)
	}
	var blocks []string
	for _, part := range strings.Split(string(raw), "```yaml\n")[1:] {
		blocks = append(blocks, part[:strings.Index(part, "```")])
	}
	loaded := 0
	for _, b := range blocks {
		if !strings.HasPrefix(b, "apiVersion:") {
			continue // a fragment
		}
		c, err := profiles.ParseConfig("docs", []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range c.Plugins {
			if !registered(p.Type) {
				t.Skipf("plugin type %s not linked", p.Type)
			}
		}
		s, _ := loadDisagg(t, b, pool(map[string]int{profiles.RoleDecode: 1, profiles.RolePrefill: 1}))
		if res, err := s.Schedule(context.Background(), chat(t, 1000)); err != nil || res.Decision != profiles.DecisionPrefillDecode {
			t.Errorf("doc example: %v %+v", err, res)
		}
		loaded++
	}
	if loaded == 0 {
		t.Error("no complete config in docs/disaggregation.md")
	}
}

// A pod in both pools is never its own remote prefiller.
func TestDisaggNoSelfPrefill(t *testing.T) {
	eps := profiles.EndpointList{profiles.NewEndpoint(0, "both-0", "10.0.0.1:8000", map[string]string{profiles.RoleLabel: profiles.RoleBoth})}
	s, _ := loadDisagg(t, pdConfig(), eps)
	res, err := s.Schedule(context.Background(), chat(t, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != profiles.DecisionDecodeOnly || res.Reason != profiles.ReasonNoPrefillEndpoint || res.Headers[profiles.HeaderPrefillerHostPort] != "" {
		t.Errorf("single both-role pod: %s/%s headers %v", res.Decision, res.Reason, res.Headers)
	}
}
