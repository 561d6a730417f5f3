package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/test/sim"
)

// TestPrefillKilledMidRequestFallsBackLocal: the only prefill endpoint is
// closed while a request routed to it is in flight (its prefill leg is
// stalled at the simulator, so the kill cuts the leg's connection, and the
// retry finds nobody listening). The sidecar decodes with local prefill
// and says so (x-spillway-prefill: fallback-local); the response is still
// a complete stream; every booking the picker made is released. A next
// request, with the prefiller gone, is served too. (The simulator's stalled
// handler outlives its closed server until the stall ends: it waits on a
// request context that a closed, unread connection does not cancel, so the
// stall is kept short for the goroutine check in TestMain.)
func TestPrefillKilledMidRequestFallsBackLocal(t *testing.T) {
	dec := startFleet(t, sim.FleetConfig{Decode: 1}).Endpoints[0]
	pre, err := sim.NewServer(sim.ServerConfig{Model: model, Role: sim.RolePrefill, TimeScale: timeScale, Faults: sim.Faults{Stall: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pre.Close() })
	side := startSidecar(t, dec.Address, []string{pre.Addr()}, kvtransfer.Options{PrefillTimeout: 10 * time.Second, Retries: 1, Backoff: 20 * time.Millisecond})
	specs := []discovery.Spec{
		{Name: "prefill-0", Address: pre.Addr(), Labels: map[string]string{profiles.RoleLabel: "prefill"}},
		{Name: "decode-0", Address: side, Labels: map[string]string{profiles.RoleLabel: "decode"}},
	}
	p := startPicker(t, readConfig(t, "../bench/configs/pd-matched.yaml"), specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)
	preEp := p.endpoint(t, pre.Addr())

	body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}],"max_tokens":4}`, model, words("fail", 50))
	type result struct {
		resp *http.Response
		out  []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, out, err := tryPost(gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
		done <- result{resp, out, err}
	}()
	// The request is booked on the prefiller once the picker dispatched
	// it; the leg then waits out the stall. Closing now or a moment before
	// the leg connects ends the same way (a cut or a refused connection),
	// so the short pause only makes the mid-leg case the usual one.
	waitFor(t, 5*time.Second, "the request booked on the prefiller", func() bool {
		r, _ := prefill.LoadOf(preEp)
		return r == 1
	})
	time.Sleep(100 * time.Millisecond)
	if err := pre.Close(); err != nil {
		t.Fatalf("killing the prefiller: %v", err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("no response after the prefiller died")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", r.resp.StatusCode, r.out)
	}
	if got := r.resp.Header.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillFallbackLocal {
		t.Fatalf("%s = %q, want %s", kvtransfer.HeaderPrefill, got, kvtransfer.PrefillFallbackLocal)
	}
	if r.resp.Header.Get(kvtransfer.HeaderPrefillDoneMs) == "" {
		t.Errorf("no %s on a failed prefill leg: the picker could not release the prefill tokens early", kvtransfer.HeaderPrefillDoneMs)
	}
	if got := decision(t, r.resp.Header.Get(director.HeaderDecision))[director.HeaderPrefiller]; got != pre.Addr() {
		t.Fatalf("picker named prefiller %q, want %s", got, pre.Addr())
	}
	if _, u := parseSSE(t, r.out); u.PromptTokens != 52 || u.CompletionTokens != 4 || u.cached() != 0 {
		t.Errorf("usage %+v (cached %d): want the local prefill's 52 prompt tokens, none cached", u, u.cached())
	}
	if n := dec.Engine.Snapshot().Finished; n != 1 {
		t.Errorf("decoder finished %d requests, want 1", n)
	}
	p.waitUnloaded(t)

	// Next request with the prefiller dead: whether or not the picker
	// still names it (its metrics go stale), the request is served and
	// released.
	resp, out := post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
	if resp.StatusCode != 200 {
		t.Fatalf("second request: status %d: %s", resp.StatusCode, out)
	}
	named := decision(t, resp.Header.Get(director.HeaderDecision))[director.HeaderPrefiller] != ""
	if got := resp.Header.Get(kvtransfer.HeaderPrefill); named && got != kvtransfer.PrefillFallbackLocal || !named && got != "" {
		t.Errorf("second request: prefiller named %v, %s = %q", named, kvtransfer.HeaderPrefill, got)
	}
	parseSSE(t, out)
	t.Logf("second request: prefiller named %v", named)
	p.waitUnloaded(t)
}

// TestEncoderDownPrefillEncodesItself: the only encoder is gone before an
// image request the picker still routes to it. The sidecar skips the
// failed encoder leg; the prefiller runs the vision encoder itself, the
// request is served with a remote prefill, and the bookings are released.
func TestEncoderDownPrefillEncodesItself(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Encode: 1, Prefill: 1, Decode: 1}, kvtransfer.Options{EncodeTimeout: 5 * time.Second})
	p := startPicker(t, readConfig(t, "../bench/configs/epd-matched.yaml"), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)
	enc := fl.ByRole(sim.RoleEncode)[0]
	if err := enc.Server.Close(); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":%q}}]}]}`,
		model, pngDataURL(t, 32, 32))
	resp, out := post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if got := decision(t, resp.Header.Get(director.HeaderDecision))[director.HeaderEncoders]; got != enc.Address {
		t.Fatalf("picker named encoders %q, want the dead %s (a pool whose only endpoint fails its scrape stays eligible, so the leg is tried)", got, enc.Address)
	}
	if got := resp.Header.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillRemote {
		t.Errorf("%s = %q, want remote", kvtransfer.HeaderPrefill, got)
	}
	if n := fl.ByRole(sim.RolePrefill)[0].Engine.Snapshot().Finished; n != 1 {
		t.Errorf("prefiller finished %d requests, want 1", n)
	}
	p.waitUnloaded(t)
}

// With two encoders, one dead: once its metrics scrape fails the picker
// names only the live one.
func TestDeadEncoderLeftOutWhileAnotherIsFresh(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Encode: 2, Prefill: 1, Decode: 1}, kvtransfer.Options{EncodeTimeout: 5 * time.Second})
	p := startPicker(t, readConfig(t, "../bench/configs/epd-matched.yaml"), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)
	encs := fl.ByRole(sim.RoleEncode)
	dead, live := encs[0], encs[1]
	if err := dead.Server.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the dead encoder's scrape to fail", func() bool {
		for _, e := range p.Store.Endpoints() {
			if e.Address == dead.Address {
				return e.Metrics().Stale
			}
		}
		return false
	})
	for i := 0; i < 4; i++ {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"messages":[{"role":"user","content":[{"type":"text","text":"image %d"},{"type":"image_url","image_url":{"url":%q}}]}]}`,
			model, i, pngDataURL(t, 32+i, 32))
		resp, out := post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		if got := decision(t, resp.Header.Get(director.HeaderDecision))[director.HeaderEncoders]; got != live.Address {
			t.Fatalf("request %d: picker named encoders %q, want only the live %s", i, got, live.Address)
		}
	}
	p.waitUnloaded(t)
}
