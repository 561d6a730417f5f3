package prefill_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

func TestChainKeysPrefixProperty(t *testing.T) {
	a := ids(1, 100)
	b := append(append([]uint32{}, a[:48]...), ids(2, 52)...)
	ka := prefill.ChainKeys(nil, 7, a, 16, 0)
	kb := prefill.ChainKeys(nil, 7, b, 16, 0)
	if len(ka) != 6 || len(kb) != 6 {
		t.Fatalf("want 6 full blocks, got %d and %d", len(ka), len(kb))
	}
	for i := range 3 {
		if ka[i] != kb[i] {
			t.Errorf("block %d of a shared prefix differs", i)
		}
	}
	for i := 3; i < 6; i++ {
		if ka[i] == kb[i] {
			t.Errorf("block %d after the divergence is equal", i)
		}
	}
	// A block's key depends on everything before it: same block tokens
	// under another parent differ.
	c := append(ids(3, 16), a[16:32]...)
	if kc := prefill.ChainKeys(nil, 7, c, 16, 0); kc[1] == ka[1] {
		t.Error("key of block 1 ignores block 0")
	}
	if ks := prefill.ChainKeys(nil, 8, a, 16, 0); ks[0] == ka[0] {
		t.Error("seed does not change the keys")
	}
	if kl := prefill.ChainKeys(nil, 7, a, 16, 2); len(kl) != 2 {
		t.Errorf("limit 2 gave %d keys", len(kl))
	}
	// Odd block sizes hash the tail tokens too.
	x, y := ids(4, 10), ids(4, 10)
	y[9]++
	if prefill.ChainKeys(nil, 0, x, 10, 0)[0] == prefill.ChainKeys(nil, 0, y, 10, 0)[0] {
		t.Error("last token of a 10-token block is ignored")
	}
}

func TestSeedSeparatesModelsAndSalts(t *testing.T) {
	if prefill.Seed("a", "") == prefill.Seed("b", "") || prefill.Seed("a", "") == prefill.Seed("a", "s") || prefill.Seed("ab", "") == prefill.Seed("a", "b") {
		t.Error("seeds collide")
	}
}

func approxSched(t *testing.T, params string, eps []*profiles.Endpoint) (*profiles.Scheduler, *prefill.ApproxProducer) {
	t.Helper()
	s, err := profiles.LoadConfigBytes("test.yaml", []byte("apiVersion: llm-d.ai/v1alpha1\nplugins:\n- type: approx-prefix-cache-producer\n  name: prefix\n  parameters: "+params+"\nschedulingProfiles:\n- name: p\n  plugins: []\n"),
		profiles.Options{Endpoints: profiles.EndpointList(eps)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, plugin[*prefill.ApproxProducer](t, s, "prefix")
}

func produce(t *testing.T, a profiles.Producer, req *profiles.Request, eps []*profiles.Endpoint) {
	t.Helper()
	if err := a.Produce(context.Background(), req, eps); err != nil {
		t.Fatal(err)
	}
}

func TestApproxRecordsConfiguredProfiles(t *testing.T) {
	eps := endpoints(3)
	pd := func() *profiles.Result {
		return &profiles.Result{Primary: "decode", Profiles: map[string]*profiles.ProfileResult{
			"decode":  {Targets: []*profiles.Endpoint{eps[0], eps[2]}}, // e2 is a fallback only
			"prefill": {Targets: []*profiles.Endpoint{eps[1]}},
		}}
	}
	for _, c := range []struct {
		params string
		want   [3]int
	}{
		{`{}`, [3]int{4, 4, 0}},                          // every profile's target, not fallbacks
		{`{recordProfiles: [prefill]}`, [3]int{0, 4, 0}}, // only the prefill pick
	} {
		_, a := approxSched(t, c.params, eps)
		req := request("m", ids(9, 70))
		produce(t, a, req, eps)
		a.OnDispatch(req, pd())
		req2 := request("m", ids(9, 70))
		produce(t, a, req2, eps)
		for i, e := range eps {
			if mb, tb, mt := prefill.MatchOf(req2, e); mb != c.want[i] || tb != 4 || mt != 16*c.want[i] {
				t.Errorf("%s: %s matched %d/%d (%d tokens), want %d/4", c.params, e.Name, mb, tb, mt, c.want[i])
			}
		}
	}
}

func TestApproxMatchStopsAtFirstMissAndModelsDiffer(t *testing.T) {
	eps := endpoints(2)
	_, a := approxSched(t, `{}`, eps)
	req := request("m", ids(1, 64))
	produce(t, a, req, eps)
	a.OnDispatch(req, result("p", eps[0]))
	// Same first 32 tokens, then different.
	r2 := request("m", append(ids(1, 64)[:32], ids(2, 64)...))
	produce(t, a, r2, eps)
	if mb, _, _ := prefill.MatchOf(r2, eps[0]); mb != 2 {
		t.Errorf("matched %d blocks, want 2", mb)
	}
	r3 := request("other-model", ids(1, 64))
	produce(t, a, r3, eps)
	if mb, _, _ := prefill.MatchOf(r3, eps[0]); mb != 0 {
		t.Errorf("another model matched %d blocks", mb)
	}
	r4 := request("m", ids(1, 64))
	r4.CacheSalt = "tenant-b"
	produce(t, a, r4, eps)
	if mb, _, _ := prefill.MatchOf(r4, eps[0]); mb != 0 {
		t.Errorf("another cache salt matched %d blocks", mb)
	}
}

func TestApproxTextFallback(t *testing.T) {
	eps := endpoints(1)
	_, a := approxSched(t, `{blockSizeTokens: 4}`, eps)
	mk := func(text string) *profiles.Request {
		return &profiles.Request{Model: "m", Messages: []profiles.Message{{Role: "user", Text: text}}}
	}
	shared := strings.Repeat("You are a helpful assistant. ", 10)
	r := mk(shared + "first question")
	produce(t, a, r, eps)
	a.OnDispatch(r, result("p", eps[0]))
	r2 := mk(shared + "second question, longer")
	produce(t, a, r2, eps)
	mb, tb, _ := prefill.MatchOf(r2, eps[0])
	if mb < len(shared)/16-1 || mb >= tb {
		t.Errorf("text fallback matched %d of %d blocks; want about %d", mb, tb, len(shared)/16)
	}
}

func TestApproxLRUBoundAndRemoval(t *testing.T) {
	eps := endpoints(2)
	_, a := approxSched(t, `{lruCapacityPerServer: 10}`, eps)
	for i := range 5 {
		r := request("m", ids(uint32(i), 64))
		produce(t, a, r, eps)
		a.OnDispatch(r, result("p", eps[0]))
	}
	if n := a.Index().Len(0); n != 10 {
		t.Errorf("index holds %d blocks, bound is 10", n)
	}
	// The newest request is fully there, the oldest gone.
	newest, oldest := request("m", ids(4, 64)), request("m", ids(0, 64))
	produce(t, a, newest, eps)
	produce(t, a, oldest, eps)
	if mb, _, _ := prefill.MatchOf(newest, eps[0]); mb != 4 {
		t.Errorf("newest matched %d", mb)
	}
	if mb, _, _ := prefill.MatchOf(oldest, eps[0]); mb != 0 {
		t.Errorf("oldest matched %d after eviction", mb)
	}
	a.OnEndpointRemoved(eps[0])
	if a.Index().Len(0) != 0 || a.Index().Blocks() != 0 {
		t.Error("removed endpoint's index kept")
	}
}

func TestApproxAutoTune(t *testing.T) {
	eps := endpoints(1)
	eps[0].SetMetrics(&profiles.Metrics{BlockSize: 32, NumGPUBlocks: 3})
	_, a := approxSched(t, `{autoTune: true}`, eps)
	r := request("m", ids(1, 320))
	produce(t, a, r, eps)
	if a.BlockSize() != 32 {
		t.Fatalf("block size %d, want 32 from cache_config_info", a.BlockSize())
	}
	a.OnDispatch(r, result("p", eps[0]))
	if c := a.Index().Capacity(0); c != 3 {
		t.Errorf("capacity %d, want 3 (num_gpu_blocks)", c)
	}
	if n := a.Index().Len(0); n != 3 {
		t.Errorf("holds %d, want 3", n)
	}
}

func TestApproxConfigErrors(t *testing.T) {
	base := "plugins:\n- type: approx-prefix-cache-producer\n  parameters: %s\nschedulingProfiles:\n- name: p\n  plugins: []\n"
	for params, want := range map[string]string{
		`{blockSizeTokens: 0}`:       "blockSizeTokens",
		`{lruCapacityPerServer: -1}`: "lruCapacityPerServer",
		`{recordProfiles: [""]}`:     "recordProfiles",
		`{blockSize: 16}`:            "unknown parameter",
	} {
		loadErr(t, strings.Replace(base, "%s", params, 1), want)
	}
}

func TestMatrixFromConfigDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "matrix.yaml"), []byte(`entries:
- {model: Qwen3-32B, accelerator: H100, engine: vLLM, tp: 2, chunkSize: 8192, peakPrefillThroughput: 20480}
- {model: Qwen3-VL-32B, accelerator: H200, engine: vLLM, tp: 2, chunkSize: 8192, peakPrefillThroughput: 15751, prefillCostPerToken: 0.00006}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "epp.yaml")
	if err := os.WriteFile(cfg, []byte(`apiVersion: llm-d.ai/v1alpha1
plugins:
- type: prefix-cache-affinity-filter
  name: affinity
  parameters:
    maxTTFTPenaltyMs: 14000
    calibrationMatrix: matrix.yaml
    fingerprint: {model: qwen3-32b, accelerator: H100, engine: vllm, tp: 2, chunkSize: 8192}
schedulingProfiles:
- name: p
  plugins: [{pluginRef: affinity}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := profiles.LoadConfigFile(cfg, profiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f := plugin[*prefill.AffinityFilter](t, s, "affinity")
	if c := f.Calibration(); c.TauTokens != 286720 || c.PeakPrefillThroughput != 20480 {
		t.Errorf("calibration %+v, want τ 286720 from the matrix's 20480", c)
	}
	if d := s.Describe(); !strings.Contains(d, "τ = 286,720 tokens = 35 chunks of 8192 ≈ 14.0 s at 20,480 tok/s (peakPrefillThroughput from matrix.yaml)") {
		t.Errorf("describe:\n%s", d)
	}
	// A missing row names the fingerprint and the rows.
	bad := strings.Replace(mustRead(t, cfg), "tp: 2, chunkSize", "tp: 4, chunkSize", 1)
	if err := os.WriteFile(cfg, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := profiles.LoadConfigFile(cfg, profiles.Options{}); err == nil || !strings.Contains(err.Error(), "no calibration entry for {model qwen3-32b, accelerator H100, engine vllm, tp 4") {
		t.Errorf("missing row: %v", err)
	}
}

func TestParseMatrixErrors(t *testing.T) {
	for doc, want := range map[string]string{
		"entries: [{model: a, accelerator: b, engine: c, tp: 0, chunkSize: 1, peakPrefillThroughput: 1}]":                                                                                       "tp must be",
		"entries: [{model: a, accelerator: b, engine: c, tp: 1, chunkSize: 1, peakPrefillThroughput: 0}]":                                                                                       "peakPrefillThroughput must be > 0",
		"entries: [{model: a, accelerator: b, engine: c, tp: 1, chunkSize: 1, peakPrefillThroughput: 1, extra: 1}]":                                                                             "unknown field",
		"entries: [{model: a, accelerator: b, engine: c, tp: 1, chunkSize: 1, peakPrefillThroughput: 1}, {model: A, accelerator: b, engine: c, tp: 1, chunkSize: 1, peakPrefillThroughput: 2}]": "duplicates",
		"entries: [{accelerator: b, engine: c, tp: 1, chunkSize: 1, peakPrefillThroughput: 1}]":                                                                                                 "required",
		"{": "not valid YAML",
	} {
		if _, err := prefill.ParseMatrix("m.yaml", []byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestChainKeysFastPathMatchesGeneric: the unrolled 16-token path and the
// generic loop give the same keys.
func TestChainKeysFastPathMatchesGeneric(t *testing.T) {
	toks := ids(11, 16*9+5)
	fast := prefill.ChainKeys(nil, 99, toks, 16, 0)
	slow := prefill.ChainKeysGeneric(nil, 99, toks, 16, 0)
	if len(fast) != 9 || len(slow) != 9 {
		t.Fatalf("%d and %d keys", len(fast), len(slow))
	}
	for i := range fast {
		if fast[i] != slow[i] {
			t.Fatalf("block %d: %x vs %x", i, fast[i], slow[i])
		}
	}
}
