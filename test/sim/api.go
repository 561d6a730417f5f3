package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// apiRequest is the union of the OpenAI request bodies the simulator reads.
type apiRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []ChatMessage   `json:"messages"`
	Input               json.RawMessage `json:"input"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MaxOutputTokens     *int            `json:"max_output_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	KVTransferParams *KVTransferParams         `json:"kv_transfer_params"`
	ECTransferParams map[string]ECTransferItem `json:"ec_transfer_params"`
}

// ChatMessage is one chat / responses message; Content is a string or a list
// of parts (text, image_url, input_text, input_image, ...).
type ChatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type apiPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"` // {"url": ...} (chat) or "..." (responses)
	Audio    json.RawMessage `json:"input_audio"`
	VideoURL json.RawMessage `json:"video_url"`
}

// KVTransferParams is vLLM's NixlConnector kv_transfer_params (protocols.md §3).
type KVTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int   `json:"remote_block_ids"`
	RemoteRequestID *string `json:"remote_request_id,omitempty"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	TPSize          int     `json:"tp_size,omitempty"`
	RemoteNumTokens int     `json:"remote_num_tokens,omitempty"`
}

// ECTransferItem is one encoder output's ec_transfer_params entry.
type ECTransferItem struct {
	PeerHost             string `json:"peer_host"`
	PeerPort             int    `json:"peer_port"`
	SizeBytes            int64  `json:"size_bytes"`
	NixlAgentMetadataB64 string `json:"nixl_agent_metadata_b64"`
}

// Tokenized is a request's prompt under the simulator's tokenizer.
type Tokenized struct {
	Tokens []uint32
	Images []string // image URLs, in order
}

// TokenizeMessages renders chat messages: each message contributes
// RoleToken(role) then its content (text words; each image part
// imageTokens tokens, see AppendImage); a final RoleToken("assistant") is the
// generation prompt.
func TokenizeMessages(msgs []ChatMessage, imageTokens int) (Tokenized, error) {
	var t Tokenized
	for _, m := range msgs {
		t.Tokens = append(t.Tokens, RoleToken(m.Role))
		if err := t.addContent(m.Content, imageTokens); err != nil {
			return t, err
		}
	}
	t.Tokens = append(t.Tokens, RoleToken("assistant"))
	return t, nil
}

func (t *Tokenized) addContent(raw json.RawMessage, imageTokens int) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		t.Tokens = AppendText(t.Tokens, s)
		return nil
	}
	var parts []apiPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return fmt.Errorf("content: %v", err)
	}
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			t.Tokens = AppendText(t.Tokens, p.Text)
		case "image_url", "input_image", "video_url", "input_audio":
			u := urlOf(p.ImageURL)
			if u == "" {
				u = urlOf(p.VideoURL) + urlOf(p.Audio)
			}
			t.Images = append(t.Images, u)
			t.Tokens = AppendImage(t.Tokens, u, imageTokens)
		default:
			return fmt.Errorf("content part type %q unsupported", p.Type)
		}
	}
	return nil
}

func urlOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		URL  string `json:"url"`
		Data string `json:"data"`
	}
	_ = json.Unmarshal(raw, &o)
	if o.URL != "" {
		return o.URL
	}
	return o.Data
}

// tokenizePrompt handles a completions "prompt": a string, a list of one
// string, or token ids.
func tokenizePrompt(raw json.RawMessage) (Tokenized, error) {
	var t Tokenized
	var s string
	if json.Unmarshal(raw, &s) == nil {
		t.Tokens = TokenizeText(s)
		return t, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		t.Tokens = TokenizeText(strings.Join(ss, " "))
		return t, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		t.Tokens = ids
		return t, nil
	}
	return t, errors.New("prompt must be a string, a list of strings or token ids")
}

// tokenizeInput handles a /v1/responses "input": a string (one user message)
// or a list of messages.
func tokenizeInput(raw json.RawMessage, imageTokens int) (Tokenized, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		b, _ := json.Marshal(s)
		return TokenizeMessages([]ChatMessage{{Role: "user", Content: b}}, imageTokens)
	}
	var msgs []ChatMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return Tokenized{}, fmt.Errorf("input: %v", err)
	}
	for i := range msgs {
		if msgs[i].Role == "" {
			msgs[i].Role = "user"
		}
	}
	return TokenizeMessages(msgs, imageTokens)
}

// tokenize returns the prompt of any of the three APIs (kind = "chat",
// "completions", "responses") or of /tokenize ("" = prompt or messages).
func (q *apiRequest) tokenize(kind string, imageTokens int) (Tokenized, error) {
	switch {
	case kind == "responses":
		if len(q.Input) == 0 {
			return Tokenized{}, errors.New("input is required")
		}
		return tokenizeInput(q.Input, imageTokens)
	case kind == "chat" || kind == "" && q.Messages != nil:
		if len(q.Messages) == 0 {
			return Tokenized{}, errors.New("messages is required")
		}
		return TokenizeMessages(q.Messages, imageTokens)
	default:
		if len(q.Prompt) == 0 {
			return Tokenized{}, errors.New("prompt is required")
		}
		return tokenizePrompt(q.Prompt)
	}
}

func (q *apiRequest) maxTokens(def int) int {
	for _, p := range []*int{q.MaxCompletionTokens, q.MaxTokens, q.MaxOutputTokens} {
		if p != nil && *p > 0 {
			return *p
		}
	}
	return def
}

var outputWords = strings.Fields("the quick brown fox jumps over a lazy dog while simulated tokens stream out of spillway")

// OutputWord is the text of the i-th generated token (0-based).
func OutputWord(i int) string { return outputWords[i%len(outputWords)] }

// OutputTokens is the token ids of the first n generated words: a chat
// reply quoted back in the next turn ("<|assistant|> the quick ...")
// tokenizes to exactly the sequence the engine generated after the prompt's
// closing RoleToken("assistant"), so multi-turn chats hit the cache.
func OutputTokens(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = WordToken(OutputWord(i))
	}
	return t
}
