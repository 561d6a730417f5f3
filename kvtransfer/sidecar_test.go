package kvtransfer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
)

type apiCase struct {
	name   string
	path   string
	body   string
	images []string
}

func apiCases(stream bool) []apiCase {
	s := "false"
	so := ""
	if stream {
		s, so = "true", `,"stream_options":{"include_usage":true}`
	}
	return []apiCase{
		{name: "chat", path: PathChatCompletions, body: `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":50,"stream":` + s + so + `}`},
		{name: "chat-images", path: PathChatCompletions, images: []string{"data:image/png;base64,AAAA", "http://img.example/b.png"},
			body: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},{"type":"image_url","image_url":{"url":"http://img.example/b.png"}}]}],"max_completion_tokens":40,"min_tokens":2,"temperature":0,"stream":` + s + so + `}`},
		{name: "completions", path: PathCompletions, body: `{"model":"m","prompt":"hello","max_tokens":50,"min_tokens":3,"stream":` + s + so + `}`},
		{name: "responses", path: PathResponses, body: `{"model":"m","input":"hello","max_output_tokens":50,"stream":` + s + `}`},
		{name: "responses-images", path: PathResponses, images: []string{"data:image/png;base64,AAAA", "http://img.example/b.png"},
			body: `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"what"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"},{"type":"input_image","image_url":"http://img.example/b.png"}]}],"max_output_tokens":50,"stream":` + s + `}`},
	}
}

// wantPrefill spells out protocols.md §3.1 on the client's body.
func wantPrefill(t *testing.T, c apiCase) map[string]any {
	w := mustJSON(t, c.body)
	w["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	w["stream"] = false
	delete(w, "stream_options")
	if c.path == PathResponses {
		w["max_output_tokens"] = 1
	} else {
		w["max_tokens"] = 1
		if _, ok := w["max_completion_tokens"]; ok {
			w["max_completion_tokens"] = 1
		}
	}
	if _, ok := w["min_tokens"]; ok {
		w["min_tokens"] = 1
	}
	if len(c.images) > 0 {
		ec := map[string]any{}
		for _, u := range c.images {
			maps.Copy(ec, ecFor(u))
		}
		w["ec_transfer_params"] = ec
	}
	return w
}

func TestSidecarLegsExactJSON(t *testing.T) {
	for _, stream := range []bool{false, true} {
		for _, c := range apiCases(stream) {
			name := c.name
			if stream {
				name += "-stream"
			}
			t.Run(name, func(t *testing.T) {
				r := newRig(t, rigOpts{encoders: 2})
				hdr := map[string]string{HeaderPrefiller: r.prefill.addr(), HeaderRequestID: "req-42",
					HeaderDestination: "1.2.3.4:8000", "Authorization": "Bearer k"}
				if len(c.images) > 0 {
					hdr[HeaderEncoders] = r.encoderList()
				}
				resp, body := r.send(t, context.Background(), c.path, c.body, hdr)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				if got := resp.Header.Get(HeaderPrefill); got != PrefillRemote {
					t.Errorf("%s = %q, want %q", HeaderPrefill, got, PrefillRemote)
				}
				if resp.Header.Get(HeaderPrefillDoneMs) == "" {
					t.Errorf("no %s on the response", HeaderPrefillDoneMs)
				}
				// Encoder legs: one per image, item i on encoder i.
				for i, e := range r.encoders {
					legs := e.got()
					if len(c.images) == 0 {
						if len(legs) != 0 {
							t.Errorf("encoder %d got %d legs for a text request", i, len(legs))
						}
						continue
					}
					if len(legs) != 1 {
						t.Fatalf("encoder %d got %d legs, want 1", i, len(legs))
					}
					want := map[string]any{"model": "m", "max_tokens": 1, "stream": false, "messages": []any{map[string]any{
						"role": "user", "content": []any{map[string]any{"type": "image_url", "image_url": map[string]any{"url": c.images[i]}}}}}}
					jsonEq(t, "encoder leg body", legs[0].Body, want)
					if legs[0].Path != PathChatCompletions {
						t.Errorf("encoder leg path %s", legs[0].Path)
					}
				}
				pl := r.prefill.got()
				if len(pl) != 1 {
					t.Fatalf("prefill legs: %d, want 1", len(pl))
				}
				jsonEq(t, "prefill leg body", pl[0].Body, wantPrefill(t, c))
				dl := r.decoder.got()
				if len(dl) != 1 {
					t.Fatalf("decode legs: %d, want 1", len(dl))
				}
				wantDecode := mustJSON(t, c.body)
				wantDecode["kv_transfer_params"] = prefillKV
				jsonEq(t, "decode leg body", dl[0].Body, wantDecode)
				for _, l := range []leg{pl[0], dl[0]} {
					if l.Path != c.path {
						t.Errorf("leg path %s, want %s", l.Path, c.path)
					}
					if got := l.Header.Get(HeaderRequestID); got != "req-42" {
						t.Errorf("leg x-request-id %q, want req-42", got)
					}
					if l.Header.Get("Authorization") != "Bearer k" {
						t.Errorf("leg lost the Authorization header")
					}
					for h := range routingHeaders {
						if l.Header.Get(h) != "" {
							t.Errorf("routing header %s forwarded to a leg", h)
						}
					}
				}
				checkCached(t, c.path, stream, body)
			})
		}
	}
}

// checkCached asserts the client saw the prefill leg's cached_tokens and,
// for streams, every decoder event otherwise unchanged.
func checkCached(t *testing.T, path string, stream bool, body []byte) {
	t.Helper()
	detailsKey := "prompt_tokens_details"
	if path == PathResponses {
		detailsKey = "input_tokens_details"
	}
	cachedOf := func(u any) float64 {
		m, _ := u.(map[string]any)
		d, _ := m[detailsKey].(map[string]any)
		v, _ := d["cached_tokens"].(float64)
		return v
	}
	if !stream {
		m := map[string]any{}
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("response %s: %v", body, err)
		}
		if got := cachedOf(m["usage"]); got != prefillCached {
			t.Errorf("cached_tokens %v, want the prefill leg's %d (body %s)", got, prefillCached, body)
		}
		return
	}
	want := decodeStreamEvents(path)
	got := splitEvents(body)
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d:\n%s", len(got), len(want), body)
	}
	for i := range want {
		if !strings.Contains(want[i], `"cached_tokens"`) {
			if got[i] != want[i] {
				t.Errorf("event %d changed:\n got %q\nwant %q", i, got[i], want[i])
			}
			continue
		}
		data := ""
		sc := bufio.NewScanner(strings.NewReader(got[i]))
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				data = s
			}
		}
		m := mustJSON(t, data)
		u := m["usage"]
		if path == PathResponses {
			u = m["response"].(map[string]any)["usage"]
		}
		if c := cachedOf(u); c != prefillCached {
			t.Errorf("final usage event cached_tokens %v, want %d: %s", c, prefillCached, data)
		}
	}
}

func splitEvents(b []byte) []string {
	var out []string
	for _, p := range bytes.SplitAfter(b, []byte("\n\n")) {
		if len(p) > 0 {
			out = append(out, string(p))
		}
	}
	return out
}

// A fully spelled-out prefill body, so that the rule-based expectation
// above cannot drift together with the code.
func TestSidecarPrefillBodyLiteral(t *testing.T) {
	r := newRig(t, rigOpts{})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"max_completion_tokens":64,"min_tokens":4,"stream":true,"stream_options":{"include_usage":true},"kv_transfer_params":{"remote_host":"evil"}}`
	resp, _ := r.send(t, context.Background(), PathChatCompletions, body, map[string]string{HeaderPrefiller: r.prefill.addr()})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := mustJSON(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"max_completion_tokens":1,"min_tokens":1,"stream":false,
		"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`)
	jsonEq(t, "prefill body", r.prefill.got()[0].Body, want)
	wantDecode := mustJSON(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":64,"max_completion_tokens":64,"min_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`)
	wantDecode["kv_transfer_params"] = prefillKV
	jsonEq(t, "decode body (client kv_transfer_params replaced by the prefill's)", r.decoder.got()[0].Body, wantDecode)
	if rid := r.prefill.got()[0].Header.Get(HeaderRequestID); rid == "" || rid != r.decoder.got()[0].Header.Get(HeaderRequestID) {
		t.Errorf("generated x-request-id not shared: prefill %q decode %q", rid, r.decoder.got()[0].Header.Get(HeaderRequestID))
	}
}

// Without routing headers the sidecar is a transparent proxy: the decoder
// gets the client's bytes.
func TestSidecarNoPrefillerPassThrough(t *testing.T) {
	r := newRig(t, rigOpts{})
	body := `{"model":"m",  "prompt":"x","max_tokens":5}`
	resp, out := r.send(t, context.Background(), PathCompletions, body, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if got := string(r.decoder.got()[0].Raw); got != body {
		t.Errorf("decoder got %q, want the client's bytes %q", got, body)
	}
	if len(r.prefill.got()) != 0 {
		t.Error("prefill leg without x-prefiller-host-port")
	}
	if resp.Header.Get(HeaderPrefill) != "" || resp.Header.Get(HeaderPrefillDoneMs) != "" {
		t.Error("prefill headers on a local request")
	}
	// Other paths are proxied too.
	resp2, _ := r.send(t, context.Background(), "/v1/other", `{}`, map[string]string{HeaderPrefiller: r.prefill.addr()})
	if resp2.StatusCode != 200 || len(r.decoder.got()) != 2 || r.decoder.got()[1].Header.Get(HeaderPrefiller) != "" {
		t.Errorf("proxy: status %d, legs %d", resp2.StatusCode, len(r.decoder.got()))
	}
}
