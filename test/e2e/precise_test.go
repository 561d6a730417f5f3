package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/test/sim"
)

// preciseConfig counts tokens with the engines' own tokenizer (the
// simulator's POST /tokenize, asked through the pool's endpoints) and
// matches prefixes from the engines' KV events. The producer's
// endpointTemplate is left at its default: the per-endpoint labels the
// fleet's endpoints file carries must override it.
const preciseConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
    backend: model-server
    modelServer: {timeout: 5s}
- type: precise-prefix-cache-producer
- type: decode-filter
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
`

// TestPreciseMatchFromSimulatorKVEvents: blocks the simulator stores (and
// publishes over real ZMQ) show up in spillway's precise prefix index
// under the endpoint that stored them, keyed from token ids the token
// producer got from the simulator's /tokenize; clearing the engine's cache
// and restarting the engine drop them.
func TestPreciseMatchFromSimulatorKVEvents(t *testing.T) {
	fleet := startFleet(t, sim.FleetConfig{Both: 2, KVEvents: true})
	// The endpoints file the simulator fleet prints is what a user feeds
	// `spillway serve --endpoints`: parse it the same way.
	specs, err := discovery.ParseEndpoints("fleet.yaml", []byte(fleet.EndpointsYAML()))
	if err != nil {
		t.Fatalf("the fleet's endpoints file does not parse: %v\n%s", err, fleet.EndpointsYAML())
	}
	for _, s := range specs {
		if s.Labels[prefill.KVEventsEndpointLabel] == "" {
			t.Fatalf("endpoint %s has no %s label; the precise producer would dial its default template instead:\n%s",
				s.Name, prefill.KVEventsEndpointLabel, fleet.EndpointsYAML())
		}
	}
	p := startPicker(t, preciseConfig, specs, 0)
	hot, cold := fleet.Endpoints[0], fleet.Endpoints[1]
	hotEp, coldEp := p.endpoint(t, hot.Address), p.endpoint(t, cold.Address)

	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":4}`, model, words("precise", 100))
	schedule := func() *profiles.Request {
		t.Helper()
		req, err := profiles.ParseRequest("/v1/chat/completions", map[string]string{"content-type": "application/json"}, []byte(body))
		if err != nil {
			t.Fatalf("ParseRequest: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := p.Scheduler.Schedule(ctx, req); err != nil {
			t.Fatalf("Schedule: %v", err)
		}
		return req
	}

	// Token ids on the request side are the engine's.
	var tok struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if resp, out := post(t, hot.URL()+"/tokenize", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, words("precise", 100)), nil); resp.StatusCode != 200 {
		t.Fatalf("/tokenize: %d %s", resp.StatusCode, out)
	} else if err := json.Unmarshal(out, &tok); err != nil {
		t.Fatalf("/tokenize: %v", err)
	}
	req := schedule()
	if !slices.Equal(req.Tokens.IDs, tok.Tokens) {
		t.Fatalf("token producer ids (%d) differ from the engine's /tokenize (%d): %v vs %v", len(req.Tokens.IDs), len(tok.Tokens), head(req.Tokens.IDs), head(tok.Tokens))
	}
	if n := p.metric(t, "spillway_token_backend_fallback_total", nil); n != 0 {
		t.Fatalf("token producer fell back to the estimate %v times", n)
	}
	if mb, _, _ := prefill.MatchOf(req, hotEp); mb != 0 {
		t.Fatalf("match before any request was served: %d blocks", mb)
	}

	// Serve it on the hot endpoint; its KV events reach the index. A SUB
	// joining late misses early batches, so wait until the producer is
	// subscribed to both publishers (a first store seen) before relying on
	// it: serve warm-up requests until the index holds one of them.
	serveHot := func() usage {
		t.Helper()
		resp, out := post(t, hot.URL()+"/v1/chat/completions", body, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("simulator: %d %s", resp.StatusCode, out)
		}
		var r struct{ Usage usage }
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return r.Usage
	}
	waitFor(t, 10*time.Second, "the hot endpoint's KV events in the index", func() bool {
		serveHot()
		mb, tb, _ := prefill.MatchOf(schedule(), hotEp)
		return mb == tb && tb > 0
	})
	served := serveHot() // a repeat: what the engine itself reports cached
	req = schedule()
	mb, tb, mt := prefill.MatchOf(req, hotEp)
	wantBlocks := tok.Count / 16
	if tb != wantBlocks || mb != wantBlocks {
		t.Fatalf("hot match %d/%d blocks, want %d/%d (prompt %d tokens)", mb, tb, wantBlocks, wantBlocks, tok.Count)
	}
	// The engine's own view: an identical request hits every full block
	// but never the last prompt token, so (len-1)/16 blocks.
	if want := (tok.Count - 1) / 16 * 16; served.cached() != want || mt != want {
		t.Fatalf("engine reported cached_tokens %d, precise match %d tokens; want both %d", served.cached(), mt, want)
	}
	if got := hot.Engine.CachedPrefix(tok.Tokens); got != mt {
		t.Fatalf("engine caches %d prompt tokens, the precise index says %d", got, mt)
	}
	if cb, _, _ := prefill.MatchOf(req, coldEp); cb != 0 {
		t.Fatalf("the cold endpoint matches %d blocks it never stored", cb)
	}

	// vLLM's reset_prefix_cache: AllBlocksCleared drops the endpoint.
	hot.Engine.Do(func(e *sim.Engine) { e.ClearCache() })
	waitFor(t, 5*time.Second, "AllBlocksCleared applied", func() bool {
		mb, _, _ := prefill.MatchOf(schedule(), hotEp)
		return mb == 0
	})

	// Repopulate, then restart the engine on the same addresses: its new
	// publisher's sequence starts over, which the producer takes for an
	// engine restart and drops what the old engine stored.
	waitFor(t, 5*time.Second, "the repopulated index", func() bool {
		post(t, hot.URL()+"/v1/chat/completions", body, nil)
		mb, tb, _ := prefill.MatchOf(schedule(), hotEp)
		return mb == tb
	})
	// The producer tells a restart from a gap by the sequence number alone:
	// a number at or below the last one seen is a restart, a higher one a
	// gap (replayed). A restarted engine's numbers start over, so its
	// restart is recognised as long as the producer's SUB is back before
	// the new engine has published more batches than the old one had. Give
	// the old engine a history (more batches), as a serving engine has.
	for i := 0; i < 20; i++ {
		post(t, hot.URL()+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":2}`, model, words(fmt.Sprintf("history%d-", i), 20)), nil)
	}
	waitFor(t, 5*time.Second, "the history applied", func() bool {
		seq, _ := p.preciseSeq(t, hotEp)
		return seq >= 20
	})
	pubAddr, replayAddr := hot.KVEventsAddr(), hot.KVReplayAddr()
	if err := hot.Server.Close(); err != nil {
		t.Fatalf("closing the hot engine: %v", err)
	}
	restarted, err := sim.NewServer(sim.ServerConfig{Name: hot.Name, Model: model, Role: sim.RoleBoth, TimeScale: timeScale, Listen: hot.Address,
		KVEvents: &sim.KVEventsConfig{Endpoint: "tcp://" + pubAddr, ReplayEndpoint: "tcp://" + replayAddr}})
	if err != nil {
		t.Fatalf("restarting the engine on %s: %v", hot.Address, err)
	}
	t.Cleanup(func() { restarted.Close() })
	defer func() {
		if t.Failed() {
			seq, ok := p.preciseSeq(t, hotEp)
			t.Logf("producer's last sequence of %s: %d (known %v); events %v, breaks reset %v replayed %v dropped %v, errors %v", hot.Name, seq, ok,
				p.metric(t, "spillway_kv_events_total", map[string]string{"endpoint": hot.Name}),
				p.metric(t, "spillway_kv_event_sequence_breaks_total", map[string]string{"action": "reset"}),
				p.metric(t, "spillway_kv_event_sequence_breaks_total", map[string]string{"action": "replayed"}),
				p.metric(t, "spillway_kv_event_sequence_breaks_total", map[string]string{"action": "dropped"}),
				p.metric(t, "spillway_kv_event_errors_total", nil))
		}
	}()
	client.CloseIdleConnections() // keep-alives to the old engine are dead
	// A real engine loads its model for a while before it serves (and
	// publishes); the SUB redials every 250ms meanwhile.
	time.Sleep(time.Second)
	// The producer's SUB redials in the background; until it is back, what
	// the new engine publishes is lost. Each try sends a new prompt, so
	// that each one publishes fresh BlockStored events.
	try := 0
	waitFor(t, 10*time.Second, "the restart detected", func() bool {
		try++
		other := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":4}`, model, words(fmt.Sprintf("other%d-", try), 40))
		post(t, restarted.URL()+"/v1/chat/completions", other, nil)
		mb, _, _ := prefill.MatchOf(schedule(), hotEp)
		return mb == 0
	})
	if n := p.metric(t, "spillway_kv_event_sequence_breaks_total", map[string]string{"action": "reset"}); n < 1 {
		t.Errorf("restart not counted as a sequence reset (%v)", n)
	}
}

func head(ids []uint32) string {
	if len(ids) > 8 {
		ids = ids[:8]
	}
	return strings.Trim(fmt.Sprint(ids), "[]")
}

// preciseSeq is the precise producer's last applied sequence number of ep.
func (p *picker) preciseSeq(t *testing.T, ep *profiles.Endpoint) (uint64, bool) {
	t.Helper()
	return p.precise(t).SeqOf(ep)
}
