package profiles

import (
	"bytes"
	"fmt"
	"math"
	"strings"

	"github.com/valyala/fastjson"
)

// The body is parsed with fastjson: one validating pass that builds a tree
// whose strings are unescaped only when read, so a 100k-token prompt is
// scanned once and copied once (encoding/json scanned it four times).
var parserPool fastjson.ParserPool

// ParseRequest parses an OpenAI-compatible body once. headers must have
// lower-case names. An empty body is valid (e.g. GET /v1/models); a body
// that is not a JSON object is a 400.
func ParseRequest(path string, headers map[string]string, body []byte) (*Request, error) {
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	r := &Request{Path: path, Headers: headers, Body: body, ID: headers["x-request-id"]}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return r, nil
	}
	if trimmed[0] != '{' {
		return nil, BadRequest("request body must be a JSON object")
	}
	p := parserPool.Get()
	defer parserPool.Put(p)
	v, err := p.ParseBytes(trimmed)
	if err != nil {
		return nil, BadRequest("malformed JSON body: %v", err)
	}
	if err := r.fill(v); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Request) fill(v *fastjson.Value) error {
	var err error
	if r.Model, err = optString(v, "model"); err != nil {
		return err
	}
	if r.CacheSalt, err = optString(v, "cache_salt"); err != nil {
		return err
	}
	if r.Stream, err = optBool(v, "stream"); err != nil {
		return err
	}
	if so := v.Get("stream_options"); so != nil && so.Type() == fastjson.TypeObject {
		if r.IncludeUsage, err = optBool(so, "include_usage"); err != nil {
			return BadRequest("stream_options.%v", err.(*StatusError).Message)
		}
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		f := v.Get(k)
		if f == nil || f.Type() == fastjson.TypeNull {
			continue
		}
		n, err := f.Float64()
		if err != nil || n != math.Trunc(n) {
			return BadRequest("%s must be an integer", k)
		}
		if n < 0 {
			return BadRequest("max tokens must not be negative, got %d", int64(n))
		}
		if n > math.MaxInt32 {
			n = math.MaxInt32
		}
		if r.MaxTokens == 0 || int(n) < r.MaxTokens {
			r.MaxTokens = int(n)
		}
	}
	if t := v.Get("tools"); t != nil && t.Type() != fastjson.TypeNull {
		r.Tools = t.MarshalTo(nil)
	}
	if msgs := v.Get("messages"); msgs != nil && msgs.Type() != fastjson.TypeNull {
		arr, err := msgs.Array()
		if err != nil {
			return BadRequest("messages must be an array")
		}
		r.Messages = make([]Message, 0, len(arr))
		for i, m := range arr {
			if m.Type() != fastjson.TypeObject {
				return BadRequest("messages[%d] must be an object", i)
			}
			role, err := optString(m, "role")
			if err != nil {
				return BadRequest("messages[%d].%s", i, err.(*StatusError).Message)
			}
			text, err := r.content(m.Get("content"), i)
			if err != nil {
				return BadRequest("messages[%d].content: %v", i, err)
			}
			r.Messages = append(r.Messages, Message{Role: role, Text: text})
		}
	}
	if pr := v.Get("prompt"); pr != nil {
		if err := r.prompt(pr); err != nil {
			return BadRequest("prompt: %v", err)
		}
	}
	if in := v.Get("input"); in != nil {
		instr, err := optString(v, "instructions")
		if err != nil {
			return err
		}
		if err := r.input(in, instr); err != nil {
			return BadRequest("input: %v", err)
		}
	}
	return nil
}

func optString(v *fastjson.Value, key string) (string, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return "", nil
	}
	b, err := f.StringBytes()
	if err != nil {
		return "", BadRequest("%s must be a string", key)
	}
	return string(b), nil
}

func optBool(v *fastjson.Value, key string) (bool, error) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return false, nil
	}
	b, err := f.Bool()
	if err != nil {
		return false, BadRequest("%s must be a boolean", key)
	}
	return b, nil
}

func str(v *fastjson.Value, key string) string {
	if f := v.Get(key); f != nil {
		if b, err := f.StringBytes(); err == nil {
			return string(b)
		}
	}
	return ""
}

// content flattens a message's content (a string or an array of parts) and
// collects its multimodal items.
func (r *Request) content(c *fastjson.Value, msg int) (string, error) {
	if c == nil || c.Type() == fastjson.TypeNull {
		return "", nil
	}
	switch c.Type() {
	case fastjson.TypeString:
		b, _ := c.StringBytes()
		return string(b), nil
	case fastjson.TypeArray:
	default:
		return "", fmt.Errorf("must be a string or an array of parts")
	}
	parts, _ := c.Array()
	var b strings.Builder
	for j, p := range parts {
		if p.Type() != fastjson.TypeObject {
			return "", fmt.Errorf("part %d must be an object", j)
		}
		typ := str(p, "type")
		switch typ {
		case "text", "input_text", "output_text":
			t := p.Get("text")
			if t == nil {
				return "", fmt.Errorf("part %d: text is required", j)
			}
			tb, err := t.StringBytes()
			if err != nil {
				return "", fmt.Errorf("part %d: text must be a string", j)
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.Write(tb)
		case "image_url", "input_image":
			url, err := partURL(p.Get("image_url"), "image_url")
			if err != nil {
				return "", fmt.Errorf("part %d: %v", j, err)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindImage, URL: url, Message: msg})
		case "video_url":
			url, err := partURL(p.Get("video_url"), "video_url")
			if err != nil {
				return "", fmt.Errorf("part %d: %v", j, err)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindVideo, URL: url, Message: msg})
		case "audio_url":
			url, err := partURL(p.Get("audio_url"), "audio_url")
			if err != nil {
				return "", fmt.Errorf("part %d: %v", j, err)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindAudio, URL: url, Message: msg})
		case "input_audio":
			a := p.Get("input_audio")
			if a == nil || a.Type() != fastjson.TypeObject || str(a, "data") == "" {
				return "", fmt.Errorf("part %d: input_audio.data is required", j)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindAudio, URL: str(a, "data"), Format: str(a, "format"), Message: msg})
		default:
			return "", fmt.Errorf("part %d: unsupported content part type %q", j, typ)
		}
	}
	return b.String(), nil
}

// partURL accepts {"url": "..."} (chat) or "..." (responses).
func partURL(v *fastjson.Value, field string) (string, error) {
	if v == nil {
		return "", fmt.Errorf("%s is required", field)
	}
	var url string
	switch v.Type() {
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		url = string(b)
	case fastjson.TypeObject:
		url = str(v, "url")
	default:
		return "", fmt.Errorf("%s must be an object with a url or a string", field)
	}
	if url == "" {
		return "", fmt.Errorf("%s.url is required", field)
	}
	return url, nil
}

func (r *Request) prompt(v *fastjson.Value) error {
	switch v.Type() {
	case fastjson.TypeNull:
		return nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		r.Prompt = string(b)
		return nil
	case fastjson.TypeArray:
	default:
		return fmt.Errorf("must be a string, a list of strings or token ids")
	}
	items, _ := v.Array()
	var texts []string
	for i, it := range items {
		switch it.Type() {
		case fastjson.TypeString:
			b, _ := it.StringBytes()
			texts = append(texts, string(b))
		case fastjson.TypeArray:
			ids, _ := it.Array()
			for _, id := range ids {
				n, err := id.Uint()
				if err != nil || n > math.MaxUint32 {
					return fmt.Errorf("item %d: token ids must be non-negative integers", i)
				}
				r.PromptIDs = append(r.PromptIDs, uint32(n))
			}
		case fastjson.TypeNumber:
			n, err := it.Uint()
			if err != nil || n > math.MaxUint32 {
				return fmt.Errorf("item %d: token ids must be non-negative integers", i)
			}
			r.PromptIDs = append(r.PromptIDs, uint32(n))
		default:
			return fmt.Errorf("item %d: must be a string, a token id or a list of token ids", i)
		}
	}
	r.Prompt = strings.Join(texts, "\n")
	return nil
}

func (r *Request) input(v *fastjson.Value, instructions string) error {
	if instructions != "" {
		r.Messages = append(r.Messages, Message{Role: "system", Text: instructions})
	}
	switch v.Type() {
	case fastjson.TypeNull:
		return nil
	case fastjson.TypeString:
		b, _ := v.StringBytes()
		r.Messages = append(r.Messages, Message{Role: "user", Text: string(b)})
		return nil
	case fastjson.TypeArray:
	default:
		return fmt.Errorf("must be a string or a list of input items")
	}
	items, _ := v.Array()
	for i, m := range items {
		if m.Type() != fastjson.TypeObject {
			return fmt.Errorf("item %d must be an object", i)
		}
		text, err := r.content(m.Get("content"), len(r.Messages))
		if err != nil {
			return fmt.Errorf("item %d: %v", i, err)
		}
		r.Messages = append(r.Messages, Message{Role: str(m, "role"), Text: text})
	}
	return nil
}
