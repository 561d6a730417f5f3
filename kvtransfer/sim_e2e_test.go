package kvtransfer

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/test/sim"
)

// The sidecar against the vLLM simulator's real HTTP servers: the simulated
// decoder rejects kv_transfer_params that do not match a held prefill, and
// the simulated prefiller rejects a do_remote_decode it cannot serve, so a
// 200 with x-spillway-prefill: remote means the handoff was carried out.
func TestSidecarWithSimulator(t *testing.T) {
	checkGoroutines(t)
	start := func(role sim.Role) *sim.Server {
		s, err := sim.NewServer(sim.ServerConfig{Role: role, TimeScale: 50})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	dec, pre, enc := start(sim.RoleDecode), start(sim.RolePrefill), start(sim.RoleEncode)
	al, _ := NewAllowlist(pre.Addr(), enc.Addr())
	sc, err := New(Options{Decoder: dec.URL(), Allow: al, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(sc)
	t.Cleanup(func() { front.Close(); sc.Close() })
	r := &rig{front: front}
	for _, tc := range []struct {
		name, path, body string
		encoders         bool
	}{
		{"chat", PathChatCompletions, `{"model":"sim-model","messages":[{"role":"user","content":"the quick brown fox jumps over the lazy dog again and again"}],"max_tokens":8}`, false},
		{"chat-stream", PathChatCompletions, `{"model":"sim-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"the quick brown fox jumps over the lazy dog"}],"max_tokens":8}`, false},
		{"completions", PathCompletions, `{"model":"sim-model","prompt":"the quick brown fox jumps over the lazy dog","max_tokens":8}`, false},
		{"responses", PathResponses, `{"model":"sim-model","input":"the quick brown fox jumps over the lazy dog","max_output_tokens":8}`, false},
		{"chat-image", PathChatCompletions, `{"model":"sim-model","messages":[{"role":"user","content":[{"type":"text","text":"what is it"},{"type":"image_url","image_url":{"url":"http://img.example/cat.png"}}]}],"max_tokens":8}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := map[string]string{HeaderPrefiller: pre.Addr()}
			if tc.encoders {
				hdr[HeaderEncoders] = enc.Addr()
			}
			resp, out := r.send(t, context.Background(), tc.path, tc.body, hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			if got := resp.Header.Get(HeaderPrefill); got != PrefillRemote {
				t.Fatalf("%s = %q, want remote (body %s)", HeaderPrefill, got, out)
			}
			if strings.Contains(tc.name, "stream") {
				if !strings.Contains(string(out), "data: [DONE]") {
					t.Errorf("stream not relayed to the end: %s", out)
				}
				return
			}
			var m map[string]any
			if err := json.Unmarshal(out, &m); err != nil || m["usage"] == nil {
				t.Errorf("response %s: %v", out, err)
			}
		})
	}
}
