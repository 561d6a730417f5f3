package kvtransfer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
)

// API paths the sidecar orchestrates.
const (
	PathChatCompletions = "/v1/chat/completions"
	PathCompletions     = "/v1/completions"
	PathResponses       = "/v1/responses"
)

// prefillKVParams asks the prefiller to keep the KV blocks for a remote
// decoder (vLLM NixlConnector).
var prefillKVParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

var (
	jsonOne   = json.RawMessage(`1`)
	jsonFalse = json.RawMessage(`false`)
)

func parseBody(body []byte) (fields, error) {
	f, err := splitObject(body)
	if err != nil {
		return nil, err
	}
	// Transfer parameters are the sidecar's to set: a client-supplied
	// kv_transfer_params could aim the decoder's KV pull at any host.
	f.del("kv_transfer_params")
	f.del("ec_transfer_params")
	return f, nil
}

// prefillBody is the prefill leg's body (protocols.md §3.1): the client's
// body with do_remote_decode, no streaming and every output limit 1.
func prefillBody(path string, orig fields, ec json.RawMessage) []byte {
	f := orig.clone()
	f.set("kv_transfer_params", prefillKVParams)
	f.set("stream", jsonFalse)
	f.del("stream_options")
	if path == PathResponses {
		f.set("max_output_tokens", jsonOne)
	} else {
		f.set("max_tokens", jsonOne)
		if f.has("max_completion_tokens") {
			f.set("max_completion_tokens", jsonOne)
		}
	}
	if f.has("min_tokens") {
		f.set("min_tokens", jsonOne)
	}
	if len(ec) > 0 {
		f.set("ec_transfer_params", ec)
	}
	return f.marshal()
}

// decodeBody is the decode leg's body: the client's body as sent plus the
// prefill's kv_transfer_params verbatim (and the encoders' merged
// ec_transfer_params when no prefill leg consumed them). With nothing to
// add and nothing stripped the original bytes are forwarded untouched.
func decodeBody(raw []byte, orig fields, stripped bool, kv, ec json.RawMessage) []byte {
	if len(kv) == 0 && len(ec) == 0 && !stripped {
		return raw
	}
	f := orig.clone()
	if len(kv) > 0 {
		f.set("kv_transfer_params", kv)
	}
	if len(ec) > 0 {
		f.set("ec_transfer_params", ec)
	}
	return f.marshal()
}

// multimodalParts returns the request's multimodal parts in order of
// appearance (chat messages[].content[], responses input[].content[]).
func multimodalParts(path string, f fields) ([]json.RawMessage, error) {
	var msgsRaw json.RawMessage
	switch path {
	case PathChatCompletions:
		msgsRaw, _ = f.get("messages")
	case PathResponses:
		msgsRaw, _ = f.get("input")
	default:
		return nil, nil
	}
	t := bytes.TrimSpace(msgsRaw)
	if len(t) == 0 || t[0] != '[' || !hasMMType(t) {
		return nil, nil
	}
	// Structural splits down to the parts: the (long) text is skipped, not
	// decoded; only multimodal parts are decoded.
	msgs, err := splitArray(t)
	if err != nil {
		return nil, fmt.Errorf("messages: %v", err)
	}
	var out []json.RawMessage
	for _, m := range msgs {
		mf, err := splitObject(m)
		if err != nil {
			if bytes.HasPrefix(bytes.TrimSpace(m), []byte("{")) {
				return nil, fmt.Errorf("message: %v", err)
			}
			continue
		}
		c, _ := mf.get("content")
		c = bytes.TrimSpace(c)
		if len(c) == 0 || c[0] != '[' {
			continue
		}
		parts, err := splitArray(c)
		if err != nil {
			return nil, fmt.Errorf("content: %v", err)
		}
		for _, p := range parts {
			pf, err := splitObject(p)
			if err != nil {
				return nil, fmt.Errorf("content part: %v", err)
			}
			typRaw, _ := pf.get("type")
			var typ string
			if len(typRaw) > 0 && json.Unmarshal(typRaw, &typ) != nil {
				return nil, fmt.Errorf("content part type must be a string")
			}
			switch typ {
			case "image_url", "video_url", "input_audio", "audio_url":
				if !json.Valid(p) {
					return nil, fmt.Errorf("content part: malformed %s part", typ)
				}
				out = append(out, p)
			case "input_image":
				// Responses API: {"type":"input_image","image_url":"URL"}.
				iu, _ := pf.get("image_url")
				var url string
				if err := json.Unmarshal(iu, &url); err != nil {
					return nil, fmt.Errorf("input_image.image_url must be a string: %v", err)
				}
				conv, _ := json.Marshal(map[string]any{"type": "image_url", "image_url": map[string]string{"url": url}})
				out = append(out, conv)
			}
		}
	}
	return out, nil
}

var mmTypes = [][]byte{[]byte(`"image_url"`), []byte(`"input_image"`), []byte(`"video_url"`), []byte(`"input_audio"`), []byte(`"audio_url"`)}

// hasMMType is a cheap pre-check: no multimodal type name, no parts.
func hasMMType(b []byte) bool {
	for _, t := range mmTypes {
		if bytes.Contains(b, t) {
			return true
		}
	}
	return false
}

// encoderBody asks an encoder to encode one item (protocols.md §3.4).
func encoderBody(model json.RawMessage, part json.RawMessage) []byte {
	var f fields
	if len(model) > 0 {
		f.set("model", model)
	}
	f.set("messages", json.RawMessage(`[{"role":"user","content":[`+string(part)+`]}]`))
	f.set("max_tokens", jsonOne)
	f.set("stream", jsonFalse)
	return f.marshal()
}

// mergeEC merges encoder responses' ec_transfer_params (objects keyed by mm
// hash) into one object; nil when there is nothing.
func mergeEC(parts []json.RawMessage) json.RawMessage {
	merged := map[string]json.RawMessage{}
	for _, p := range parts {
		var m map[string]json.RawMessage
		if json.Unmarshal(p, &m) == nil {
			maps.Copy(merged, m)
		}
	}
	if len(merged) == 0 {
		return nil
	}
	b, _ := json.Marshal(merged)
	return b
}

// legResponse is what the sidecar reads from prefill and encoder answers.
type legResponse struct {
	KV    json.RawMessage `json:"kv_transfer_params"`
	EC    json.RawMessage `json:"ec_transfer_params"`
	Usage *struct {
		PromptDetails *struct {
			Cached *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		InputDetails *struct {
			Cached *int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

func isNull(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || string(t) == "null"
}

// cachedTokens returns the cached-token count a response reported.
func (l *legResponse) cachedTokens() (int, bool) {
	if l.Usage == nil {
		return 0, false
	}
	if d := l.Usage.PromptDetails; d != nil && d.Cached != nil {
		return *d.Cached, true
	}
	if d := l.Usage.InputDetails; d != nil && d.Cached != nil {
		return *d.Cached, true
	}
	return 0, false
}

// rewriteCached sets usage.*_tokens_details.cached_tokens in one response
// object (a full body or one SSE event): top-level "usage" (chat,
// completions) or "response.usage" (responses API events). It returns the
// input unchanged when there is no usage object.
func rewriteCached(obj []byte, cached int) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(obj, &top) != nil {
		return obj
	}
	if u, ok := top["usage"]; ok && !isNull(u) {
		nu, ok := rewriteUsage(u, cached)
		if !ok {
			return obj
		}
		top["usage"] = nu
		b, _ := json.Marshal(top)
		return b
	}
	if r, ok := top["response"]; ok && !isNull(r) {
		var resp map[string]json.RawMessage
		if json.Unmarshal(r, &resp) != nil {
			return obj
		}
		u, ok := resp["usage"]
		if !ok || isNull(u) {
			return obj
		}
		nu, ok := rewriteUsage(u, cached)
		if !ok {
			return obj
		}
		resp["usage"] = nu
		top["response"], _ = json.Marshal(resp)
		b, _ := json.Marshal(top)
		return b
	}
	return obj
}

func rewriteUsage(u json.RawMessage, cached int) (json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(u, &m) != nil {
		return nil, false
	}
	key := "prompt_tokens_details"
	if _, ok := m["input_tokens"]; ok {
		key = "input_tokens_details" // responses API usage shape
	}
	var d map[string]json.RawMessage
	if v, ok := m[key]; ok && !isNull(v) {
		if json.Unmarshal(v, &d) != nil {
			return nil, false
		}
	}
	if d == nil {
		d = map[string]json.RawMessage{}
	}
	d["cached_tokens"] = json.RawMessage(fmt.Sprint(cached))
	m[key], _ = json.Marshal(d)
	b, _ := json.Marshal(m)
	return b, true
}
