package profiles

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// API paths spillway understands.
const (
	PathChatCompletions = "/v1/chat/completions"
	PathCompletions     = "/v1/completions"
	PathResponses       = "/v1/responses"
)

// Multimodal item kinds.
const (
	KindImage = "image"
	KindAudio = "audio"
	KindVideo = "video"
)

// Message is one chat message with its text flattened and its multimodal
// parts referenced by index into Request.Multimodal.
type Message struct {
	Role string
	Text string // all text parts joined by "\n"
}

// MultimodalItem is one image, audio clip or video in the request, in order
// of appearance.
type MultimodalItem struct {
	Kind    string // KindImage, KindAudio, KindVideo
	URL     string // data: URL or remote URL (audio: base64 data)
	Format  string // audio format when given
	Message int    // index of the message that holds it (-1 for prompt APIs)
}

// TokenCounts is what the token producer learned about the prompt.
type TokenCounts struct {
	Text     int      // text tokens
	Image    int      // image (and other multimodal) tokens
	Weighted float64  // Text + Image × imageTokenCost: the load the prompt puts on prefill
	IDs      []uint32 // token ids (real or stable pseudo-ids) for prefix hashing
	Images   []ImageTokens
	Backend  string // which backend counted the text
	Counted  bool   // a producer has filled the counts
}

// ImageTokens is the estimate for one multimodal item.
type ImageTokens struct {
	Width, Height int
	Tokens        int
	Hash          uint64 // content hash, for the prefix index and encoder-cache affinity
	Default       bool   // size unknown, the default resolution was used
}

// Total returns text + image tokens.
func (t *TokenCounts) Total() int { return t.Text + t.Image }

// Request is an inference request parsed once from its body. Plugins read it;
// producers write their results through Put or the Tokens field before the
// profiles run.
type Request struct {
	ID           string            // x-request-id
	Path         string            // request path without query
	Headers      map[string]string // lower-case names; routing headers already removed
	Body         []byte            // the raw body as received
	Model        string
	Stream       bool
	IncludeUsage bool
	MaxTokens    int // 0 when not set
	Messages     []Message
	Prompt       string // /v1/completions prompt, /v1/responses string input, joined
	PromptIDs    []uint32
	Tools        json.RawMessage
	CacheSalt    string
	Multimodal   []MultimodalItem

	// SubsetHint, when non-nil, restricts candidates to these addresses.
	SubsetHint []string
	// Tokens is filled by the token producer.
	Tokens TokenCounts

	mu    sync.Mutex
	state map[string]any
	trace []TraceEntry
	debug bool
}

// TraceEntry is one line of a decision's explanation.
type TraceEntry struct {
	Profile string
	Plugin  string
	Text    string
}

// Put stores per-request producer state.
func (r *Request) Put(key string, v any) {
	r.mu.Lock()
	if r.state == nil {
		r.state = make(map[string]any, 4)
	}
	r.state[key] = v
	r.mu.Unlock()
}

// Get returns per-request producer state.
func (r *Request) Get(key string) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state[key]
}

// SetDebug turns on text traces for this request.
func (r *Request) SetDebug(on bool) { r.debug = on }

// Debug reports whether plugins should write text traces. Plugins must
// check it before formatting strings so that the hot path does not
// allocate.
func (r *Request) Debug() bool { return r.debug }

// Annotate records why a plugin decided what it did.
func (r *Request) Annotate(profile, plugin, text string) {
	r.mu.Lock()
	r.trace = append(r.trace, TraceEntry{Profile: profile, Plugin: plugin, Text: text})
	r.mu.Unlock()
}

// Trace returns a copy of the decision trace.
func (r *Request) Trace() []TraceEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]TraceEntry(nil), r.trace...)
}

// PromptText returns the prompt as one string: role and text of every
// message, or the completion prompt. It allocates; producers call it once.
func (r *Request) PromptText() string {
	if len(r.Messages) == 0 {
		return r.Prompt
	}
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// RawFields decodes the body's top-level fields, for callers that rewrite
// it. It is not on the scheduling path.
func (r *Request) RawFields() (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if len(bytes.TrimSpace(r.Body)) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	if err := json.Unmarshal(r.Body, &m); err != nil {
		return nil, BadRequest("malformed JSON body: %v", err)
	}
	return m, nil
}

// HasMultimodal reports whether the request carries images, audio or video.
func (r *Request) HasMultimodal() bool { return len(r.Multimodal) > 0 }

// body fields we read. Content and prompt stay raw: they have several shapes.
type wireBody struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MaxOutputTokens     *int            `json:"max_output_tokens"`
	Messages            []wireMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        string          `json:"instructions"`
	Tools               json.RawMessage `json:"tools"`
	CacheSalt           string          `json:"cache_salt"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wirePart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"` // {"url":..} in chat, a string in responses
	VideoURL *struct {
		URL string `json:"url"`
	} `json:"video_url"`
	InputAudio *struct {
		Data   string `json:"data"`
		Format string `json:"format"`
	} `json:"input_audio"`
	AudioURL *struct {
		URL string `json:"url"`
	} `json:"audio_url"`
}

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
	var w wireBody
	if err := json.Unmarshal(trimmed, &w); err != nil {
		return nil, BadRequest("malformed request body: %v", err)
	}
	r.Model, r.Stream, r.Tools, r.CacheSalt = w.Model, w.Stream, w.Tools, w.CacheSalt
	if w.StreamOptions != nil {
		r.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	for _, p := range []*int{w.MaxTokens, w.MaxCompletionTokens, w.MaxOutputTokens} {
		if p != nil {
			if *p < 0 {
				return nil, BadRequest("max tokens must not be negative, got %d", *p)
			}
			if r.MaxTokens == 0 || *p < r.MaxTokens {
				r.MaxTokens = *p
			}
		}
	}
	for i, m := range w.Messages {
		text, err := r.parseContent(m.Content, i)
		if err != nil {
			return nil, BadRequest("messages[%d].content: %v", i, err)
		}
		r.Messages = append(r.Messages, Message{Role: m.Role, Text: text})
	}
	if len(w.Prompt) > 0 {
		if err := r.parsePrompt(w.Prompt); err != nil {
			return nil, BadRequest("prompt: %v", err)
		}
	}
	if len(w.Input) > 0 {
		if err := r.parseInput(w.Input, w.Instructions); err != nil {
			return nil, BadRequest("input: %v", err)
		}
	}
	return r, nil
}

func (r *Request) parseContent(raw json.RawMessage, msg int) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	if raw[0] != '[' {
		return "", fmt.Errorf("must be a string or an array of parts")
	}
	var parts []wirePart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", err
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		case "image_url", "input_image":
			url, err := imageURL(p.ImageURL)
			if err != nil {
				return "", fmt.Errorf("part %d: %v", j, err)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindImage, URL: url, Message: msg})
		case "video_url":
			if p.VideoURL == nil || p.VideoURL.URL == "" {
				return "", fmt.Errorf("part %d: video_url.url is required", j)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindVideo, URL: p.VideoURL.URL, Message: msg})
		case "input_audio":
			if p.InputAudio == nil || p.InputAudio.Data == "" {
				return "", fmt.Errorf("part %d: input_audio.data is required", j)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindAudio, URL: p.InputAudio.Data, Format: p.InputAudio.Format, Message: msg})
		case "audio_url":
			if p.AudioURL == nil || p.AudioURL.URL == "" {
				return "", fmt.Errorf("part %d: audio_url.url is required", j)
			}
			r.Multimodal = append(r.Multimodal, MultimodalItem{Kind: KindAudio, URL: p.AudioURL.URL, Message: msg})
		default:
			return "", fmt.Errorf("part %d: unsupported content part type %q", j, p.Type)
		}
	}
	return b.String(), nil
}

// imageURL accepts {"url": "..."} (chat) or "..." (responses).
func imageURL(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", fmt.Errorf("image_url is required")
	}
	var url string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &url); err != nil {
			return "", err
		}
	} else {
		var o struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal(raw, &o); err != nil {
			return "", fmt.Errorf("image_url: %v", err)
		}
		url = o.URL
	}
	if url == "" {
		return "", fmt.Errorf("image_url.url is required")
	}
	return url, nil
}

func (r *Request) parsePrompt(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil
	case raw[0] == '"':
		return json.Unmarshal(raw, &r.Prompt)
	case raw[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return err
		}
		var texts []string
		for i, it := range items {
			it = bytes.TrimSpace(it)
			if len(it) == 0 {
				continue
			}
			switch it[0] {
			case '"':
				var s string
				if err := json.Unmarshal(it, &s); err != nil {
					return fmt.Errorf("item %d: %v", i, err)
				}
				texts = append(texts, s)
			case '[':
				var ids []uint32
				if err := json.Unmarshal(it, &ids); err != nil {
					return fmt.Errorf("item %d: token ids: %v", i, err)
				}
				r.PromptIDs = append(r.PromptIDs, ids...)
			default:
				var id uint32
				if err := json.Unmarshal(it, &id); err != nil {
					return fmt.Errorf("item %d: must be a string, a token id or a list of token ids", i)
				}
				r.PromptIDs = append(r.PromptIDs, id)
			}
		}
		r.Prompt = strings.Join(texts, "\n")
		return nil
	default:
		return fmt.Errorf("must be a string, a list of strings or token ids")
	}
}

func (r *Request) parseInput(raw json.RawMessage, instructions string) error {
	raw = bytes.TrimSpace(raw)
	if instructions != "" {
		r.Messages = append(r.Messages, Message{Role: "system", Text: instructions})
	}
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return err
		}
		r.Messages = append(r.Messages, Message{Role: "user", Text: s})
		return nil
	case raw[0] == '[':
		var items []wireMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return err
		}
		for i, m := range items {
			text, err := r.parseContent(m.Content, len(r.Messages))
			if err != nil {
				return fmt.Errorf("item %d: %v", i, err)
			}
			r.Messages = append(r.Messages, Message{Role: m.Role, Text: text})
		}
		return nil
	default:
		return fmt.Errorf("must be a string or a list of input items")
	}
}
