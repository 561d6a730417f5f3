package tokenproducer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spillway-llm/spillway/profiles"
)

// ModelServerParams configure the model-server backend.
type ModelServerParams struct {
	// URL is the engine's base URL (http://host:port). Empty: the pool's
	// candidate endpoints are asked in turn.
	URL string `json:"url,omitempty"`
	// Path of the tokenize endpoint (vLLM: /tokenize).
	Path string `json:"path,omitempty"`
	// Timeout bounds one call, including the wait for a concurrency slot.
	Timeout profiles.Duration `json:"timeout,omitempty"`
	// MaxConcurrency bounds calls in flight; the rest fall back to estimate.
	MaxConcurrency int `json:"maxConcurrency,omitempty"`
	// MaxResponseBytes bounds the response read.
	MaxResponseBytes int64 `json:"maxResponseBytes,omitempty"`
}

func (p *ModelServerParams) defaults() {
	if p.Path == "" {
		p.Path = "/tokenize"
	}
	if p.Timeout <= 0 {
		p.Timeout = profiles.Duration(200 * time.Millisecond)
	}
	if p.MaxConcurrency <= 0 {
		p.MaxConcurrency = 16
	}
	if p.MaxResponseBytes <= 0 {
		p.MaxResponseBytes = 16 << 20
	}
}

// FallbackError says why the model server could not count; Reason is the
// metric label (timeout, busy, no_endpoint, status, error, bad_response).
type FallbackError struct {
	Reason string
	Err    error
}

func (e *FallbackError) Error() string {
	return "model-server tokenize: " + e.Reason + ": " + e.Err.Error()
}
func (e *FallbackError) Unwrap() error { return e.Err }

// modelServerCounter asks the engine: vLLM's POST /tokenize with
// {"model","messages"} (the chat template applied, with the generation
// prompt) or {"model","prompt"}, answered by {"count","tokens":[...]}.
// Only text is sent: images are counted by the family formula, so the
// engine never fetches or decodes them for a count.
type modelServerCounter struct {
	p      ModelServerParams
	client *http.Client
	sem    chan struct{}
	rr     atomic.Uint64
}

func newModelServer(p ModelServerParams) *modelServerCounter {
	p.defaults()
	return &modelServerCounter{p: p, client: &http.Client{}, sem: make(chan struct{}, p.MaxConcurrency)}
}

type tokenizeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type tokenizeRequest struct {
	Model               string            `json:"model"`
	Prompt              *string           `json:"prompt,omitempty"`
	Messages            []tokenizeMessage `json:"messages,omitempty"`
	AddGenerationPrompt *bool             `json:"add_generation_prompt,omitempty"`
}

type tokenizeResponse struct {
	Count  *int     `json:"count"`
	Tokens []uint32 `json:"tokens"`
}

func (m *modelServerCounter) base(eps []*profiles.Endpoint) (string, error) {
	if m.p.URL != "" {
		return strings.TrimRight(m.p.URL, "/"), nil
	}
	if len(eps) == 0 {
		return "", &FallbackError{Reason: "no_endpoint", Err: errors.New("no url configured and no candidate endpoint")}
	}
	ep := eps[m.rr.Add(1)%uint64(len(eps))]
	return "http://" + ep.Address, nil
}

func (m *modelServerCounter) CountText(ctx context.Context, req *profiles.Request, eps []*profiles.Endpoint) (TextResult, error) {
	base, err := m.base(eps)
	if err != nil {
		return TextResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.p.Timeout))
	defer cancel()
	select {
	case m.sem <- struct{}{}:
		defer func() { <-m.sem }()
	default:
		return TextResult{}, &FallbackError{Reason: "busy", Err: fmt.Errorf("%d calls already in flight", cap(m.sem))}
	}
	tr := tokenizeRequest{Model: req.Model}
	if len(req.Messages) > 0 {
		tr.Messages = make([]tokenizeMessage, len(req.Messages))
		for i, msg := range req.Messages {
			tr.Messages[i] = tokenizeMessage{Role: msg.Role, Content: msg.Text}
		}
		yes := true
		tr.AddGenerationPrompt = &yes
	} else {
		p := req.Prompt
		tr.Prompt = &p
	}
	body, err := json.Marshal(tr)
	if err != nil {
		return TextResult{}, &FallbackError{Reason: "error", Err: err}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+m.p.Path, bytes.NewReader(body))
	if err != nil {
		return TextResult{}, &FallbackError{Reason: "error", Err: err}
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := m.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return TextResult{}, &FallbackError{Reason: "timeout", Err: err}
		}
		return TextResult{}, &FallbackError{Reason: "error", Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return TextResult{}, &FallbackError{Reason: "status", Err: fmt.Errorf("%s%s answered %s", base, m.p.Path, resp.Status)}
	}
	var out tokenizeResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, m.p.MaxResponseBytes)).Decode(&out); err != nil {
		if ctx.Err() != nil {
			return TextResult{}, &FallbackError{Reason: "timeout", Err: err}
		}
		return TextResult{}, &FallbackError{Reason: "bad_response", Err: err}
	}
	n := len(out.Tokens)
	if out.Count != nil {
		n = *out.Count
	}
	if n < 0 || (out.Count == nil && out.Tokens == nil) {
		return TextResult{}, &FallbackError{Reason: "bad_response", Err: errors.New("response has neither count nor tokens")}
	}
	ids := out.Tokens
	if len(ids) != n {
		ids = nil // a count without matching ids: keep pseudo-ids
	}
	if len(req.Messages) == 0 && len(req.PromptIDs) > 0 {
		n += len(req.PromptIDs)
		if ids != nil {
			ids = append(ids, req.PromptIDs...)
		}
	}
	return TextResult{Tokens: n, IDs: ids, Backend: BackendModelServer}, nil
}
