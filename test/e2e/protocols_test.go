package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/test/sim"
)

// cachedIn finds the cached-token count in a response body: a JSON object
// or the last SSE event that carries usage (chat/completions `usage`,
// responses `response.usage`).
func cachedIn(t *testing.T, body string) (prompt, cached int) {
	t.Helper()
	type u struct {
		PromptTokens int `json:"prompt_tokens"`
		InputTokens  int `json:"input_tokens"`
		P            *struct {
			Cached int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		I *struct {
			Cached int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	}
	type obj struct {
		Usage    *u `json:"usage"`
		Response *struct {
			Usage *u `json:"usage"`
		} `json:"response"`
	}
	var last *u
	consider := func(s string) {
		var o obj
		if json.Unmarshal([]byte(s), &o) != nil {
			return
		}
		if o.Usage != nil {
			last = o.Usage
		} else if o.Response != nil && o.Response.Usage != nil {
			last = o.Response.Usage
		}
	}
	if strings.HasPrefix(strings.TrimSpace(body), "{") {
		consider(body)
	} else {
		for _, line := range strings.Split(body, "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				consider(d)
			}
		}
	}
	if last == nil {
		t.Fatalf("no usage in %s", body)
	}
	switch {
	case last.P != nil:
		return last.PromptTokens, last.P.Cached
	case last.I != nil:
		return last.InputTokens, last.I.Cached
	}
	t.Fatalf("usage without cached tokens in %s", body)
	return 0, 0
}

// TestPDProtocolsThroughGateway: completions and responses, streamed and
// not, through the gateway and the sidecar: each is prefilled remotely, its
// stream arrives whole, a repeat reports the prefill leg's cached tokens in
// the API's own usage shape, and every booking is released.
func TestPDProtocolsThroughGateway(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Prefill: 1, Decode: 1}, kvtransfer.Options{})
	p := startPicker(t, readConfig(t, "../bench/configs/pd-matched.yaml"), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)
	for _, tc := range []struct {
		name, path, body, end string
		prompt                int
	}{
		{"completions", "/v1/completions", `{"model":%q,"prompt":%q,"max_tokens":3}`, `"finish_reason"`, 100},
		{"completions-stream", "/v1/completions", `{"model":%q,"prompt":%q,"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`, "data: [DONE]", 100},
		{"responses", "/v1/responses", `{"model":%q,"input":%q,"max_output_tokens":3}`, `"completed"`, 102},
		{"responses-stream", "/v1/responses", `{"model":%q,"input":%q,"max_output_tokens":3,"stream":true}`, "event: response.completed", 102},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(tc.body, model, words(tc.name, 100))
			for turn, want := range []int{0, (tc.prompt - 1) / 16 * 16} {
				resp, out := post(t, gw+tc.path, body, nil)
				if resp.StatusCode != 200 {
					t.Fatalf("turn %d: status %d: %s", turn, resp.StatusCode, out)
				}
				if got := resp.Header.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillRemote {
					t.Errorf("turn %d: %s = %q", turn, kvtransfer.HeaderPrefill, got)
				}
				if !strings.Contains(string(out), tc.end) {
					t.Errorf("turn %d: response lacks %s: %s", turn, tc.end, out)
				}
				if pt, c := cachedIn(t, string(out)); pt != tc.prompt || c != want {
					t.Errorf("turn %d: prompt %d cached %d, want %d and the prefill leg's %d", turn, pt, c, tc.prompt, want)
				}
				p.waitUnloaded(t)
			}
		})
	}
}
