package profiles

import (
	"bytes"
	"encoding/json"
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
