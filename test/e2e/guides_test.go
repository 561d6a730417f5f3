package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/test/sim"
)

// guideConfig extracts the picker config from a deploy guide's ConfigMap.
func guideConfig(t *testing.T, guide string) string {
	t.Helper()
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(readConfig(t, "../../deploy/guides/"+guide+"/picker-config.yaml")), &cm); err != nil {
		t.Fatalf("guide %s: %v", guide, err)
	}
	c := cm.Data["config.yaml"]
	if c == "" {
		t.Fatalf("guide %s: no data.config.yaml in the ConfigMap", guide)
	}
	return c
}

// TestPDGuideSplitsOnlyUncachedPrompts runs the P/D deploy guide's picker
// config as shipped (decode first, prefix-based-pd-decider: disaggregate a
// prompt of ≥ 512 tokens unless the decode pod caches all but < 256 of
// them). A long prompt is prefilled remotely; the same prompt again stays
// on the decode pod, which really does cache it: the KV it pulled from the
// prefiller entered its prefix cache, as on vLLM.
func TestPDGuideSplitsOnlyUncachedPrompts(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Prefill: 1, Decode: 1}, kvtransfer.Options{})
	p := startPicker(t, guideConfig(t, "pd-disaggregation"), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)

	const n = 1 + 700 + 1
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":4}`, model, words("guide", 700))
	for turn, want := range []struct {
		prefill string
		cached  int
	}{{kvtransfer.PrefillRemote, 0}, {"", (n - 1) / 16 * 16}} {
		resp, out := post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: status %d: %s", turn, resp.StatusCode, out)
		}
		if got := resp.Header.Get(kvtransfer.HeaderPrefill); got != want.prefill {
			t.Errorf("turn %d: %s = %q, want %q (decision %q)", turn, kvtransfer.HeaderPrefill, got, want.prefill, resp.Header.Get(director.HeaderDecision))
		}
		var r struct{ Usage usage }
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("turn %d: %s: %v", turn, out, err)
		}
		if r.Usage.PromptTokens != n || r.Usage.cached() != want.cached {
			t.Errorf("turn %d: prompt_tokens %d cached %d, want %d and %d", turn, r.Usage.PromptTokens, r.Usage.cached(), n, want.cached)
		}
		p.waitUnloaded(t)
	}
}

// TestEPDGuideImage runs the E-P-D deploy guide's picker config as
// shipped: an image request runs its encoder leg and a remote prefill.
func TestEPDGuideImage(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Encode: 1, Prefill: 1, Decode: 1}, kvtransfer.Options{})
	p := startPicker(t, guideConfig(t, "e-p-d-disaggregation"), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)

	body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":%q}}]}]}`,
		model, pngDataURL(t, 64, 64))
	enc := fl.ByRole(sim.RoleEncode)[0]
	resp, out := post(t, gw+"/v1/chat/completions", body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if got := resp.Header.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillRemote {
		t.Errorf("%s = %q, want remote", kvtransfer.HeaderPrefill, got)
	}
	if n := enc.Engine.Snapshot().Finished; n != 1 {
		t.Errorf("encoder served %d requests, want 1", n)
	}
	if got := p.metric(t, "spillway_tokens_counted_total", map[string]string{"kind": "image"}); got <= 0 {
		t.Errorf("token producer counted %v image tokens", got)
	}
	p.waitUnloaded(t)
}
