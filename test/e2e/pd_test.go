package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/test/sim"
)

// decision parses the x-spillway-decision trace into its key=value
// fields (destination, x-prefiller-host-port, ...).
func decision(t *testing.T, h string) map[string]string {
	t.Helper()
	if h == "" {
		t.Fatalf("no %s header on the response", director.HeaderDecision)
	}
	out := map[string]string{}
	for _, f := range strings.Split(h, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(f), "="); ok && !strings.Contains(k, " ") {
			out[k] = v
		}
	}
	return out
}

// finished is each simulator's completed-request counter.
func finished(f *sim.Fleet) map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range f.Endpoints {
		out[e.Address] = e.Engine.Snapshot().Finished
	}
	return out
}

// TestPDStreamThroughGatewayAndSidecar: the shipped P/D config behind
// spillway's gateway, a kvtransfer sidecar in front of every simulated
// decoder, simulated prefillers. A streamed chat request comes back as a
// valid SSE stream whose usage reports the prefill leg's cached tokens;
// the prefiller the picker named did the prefill; an identical request
// sticks to it and hits its cache; the in-flight bookings return to zero.
func TestPDStreamThroughGatewayAndSidecar(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Prefill: 2, Decode: 2}, kvtransfer.Options{})
	p := startPicker(t, readConfig(t, "../bench/configs/pd-matched.yaml"), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)

	prompt := words("pd", 100) // 1 + 100 + 1 tokens: 6 full blocks
	body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}],"max_tokens":6}`, model, prompt)
	prefillers := map[string]bool{}
	for _, e := range fl.ByRole(sim.RolePrefill) {
		prefillers[e.Address] = true
	}
	var firstPrefiller string
	for turn, wantCached := range []int{0, (102 - 1) / 16 * 16} {
		before := finished(fl.Fleet)
		resp, out := post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: status %d: %s", turn, resp.StatusCode, out)
		}
		if ct := resp.Header.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("turn %d: content-type %q", turn, ct)
		}
		if got := resp.Header.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillRemote {
			t.Fatalf("turn %d: %s = %q, want remote", turn, kvtransfer.HeaderPrefill, got)
		}
		text, u := parseSSE(t, out)
		if u.PromptTokens != 102 || u.CompletionTokens != 6 || len(strings.Fields(text)) != 6 {
			t.Errorf("turn %d: usage %+v, text %q", turn, u, text)
		}
		// The sidecar reports the prefill leg's cached tokens: the decode
		// leg received the whole prompt's KV and would report more.
		if u.cached() != wantCached {
			t.Errorf("turn %d: cached_tokens %d, want the prefill leg's %d", turn, u.cached(), wantCached)
		}
		dec := decision(t, resp.Header.Get(director.HeaderDecision))
		pre := dec[director.HeaderPrefiller]
		if !prefillers[pre] {
			t.Fatalf("turn %d: prefiller %q is not a prefill endpoint (decision %q)", turn, pre, resp.Header.Get(director.HeaderDecision))
		}
		dst := strings.Split(dec["destination"], ",")[0]
		decoder := fl.sidecar[dst]
		if decoder == nil {
			t.Fatalf("turn %d: destination %q is not a decode sidecar", turn, dst)
		}
		after := finished(fl.Fleet)
		for addr := range after {
			want := uint64(0)
			if addr == pre || addr == decoder.Address {
				want = 1
			}
			if after[addr]-before[addr] != want {
				t.Errorf("turn %d: %s finished %d requests, want %d (prefiller %s, decoder %s)", turn, addr, after[addr]-before[addr], want, pre, decoder.Address)
			}
		}
		if turn == 0 {
			firstPrefiller = pre
		} else if pre != firstPrefiller {
			t.Errorf("identical request went to prefiller %s, not %s which caches it", pre, firstPrefiller)
		}
		p.waitUnloaded(t)
	}
}
