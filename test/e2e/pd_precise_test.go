package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/test/sim"
)

// TestPDWithPreciseIndex: the P/D config with the precise producer (KV
// events from every simulated engine, prefill and decode) instead of the
// approximate one, and the token producer asking the pool's endpoints'
// /tokenize (through the decode sidecars, which proxy it). The prefiller
// that computed a prompt publishes its blocks; an identical request sticks
// to it and hits its cache.
func TestPDWithPreciseIndex(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Prefill: 2, Decode: 1, KVEvents: true}, kvtransfer.Options{})
	cfg := strings.Replace(readConfig(t, "../bench/configs/pd-matched.yaml"), "  - type: approx-prefix-cache-producer\n",
		"  - type: precise-prefix-cache-producer\n  - type: token-producer\n    parameters:\n      backend: model-server\n      modelServer: {timeout: 5s}\n", 1)
	if !strings.Contains(cfg, "precise-prefix-cache-producer") {
		t.Fatal("pd-matched.yaml changed: no approx-prefix-cache-producer line to replace")
	}
	p := startPicker(t, cfg, fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)

	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":3}`, model, words("precisepd", 200))
	const n = 202
	resp, out := post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
	if resp.StatusCode != 200 || resp.Header.Get(kvtransfer.HeaderPrefill) != kvtransfer.PrefillRemote {
		t.Fatalf("status %d, %s %q: %s", resp.StatusCode, kvtransfer.HeaderPrefill, resp.Header.Get(kvtransfer.HeaderPrefill), out)
	}
	first := decision(t, resp.Header.Get(director.HeaderDecision))[director.HeaderPrefiller]
	firstEp := p.endpoint(t, first)
	// The prefiller's BlockStored events reach the index.
	waitFor(t, 5*time.Second, "the prefiller's blocks in the precise index", func() bool {
		return p.precise(t).Index().Len(firstEp.Index) >= n/16
	})
	resp, out = post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if again := decision(t, resp.Header.Get(director.HeaderDecision))[director.HeaderPrefiller]; again != first {
		t.Errorf("identical request prefilled on %s, not on %s which caches it", again, first)
	}
	if _, c := cachedIn(t, string(out)); c != (n-1)/16*16 {
		t.Errorf("cached_tokens %d, want %d", c, (n-1)/16*16)
	}
	if fb := p.metric(t, "spillway_token_backend_fallback_total", nil); fb != 0 {
		t.Errorf("token producer fell back to the estimate %v times", fb)
	}
	p.waitUnloaded(t)
}

// precise returns the scheduler's precise producer.
func (p *picker) precise(t *testing.T) *prefill.PreciseProducer {
	t.Helper()
	for _, pl := range p.Scheduler.Plugins() {
		if pp, ok := pl.(*prefill.PreciseProducer); ok {
			return pp
		}
	}
	t.Fatal("no precise producer in the scheduler")
	return nil
}
