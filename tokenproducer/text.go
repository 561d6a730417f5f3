package tokenproducer

import (
	"context"

	"github.com/spillway-llm/spillway/profiles"
)

// TextResult is a text backend's count.
type TextResult struct {
	Tokens  int
	IDs     []uint32 // real token ids; nil when the backend has none
	Backend string   // the backend that produced the count
}

// TextCounter counts a request's text tokens.
type TextCounter interface {
	CountText(ctx context.Context, req *profiles.Request, eps []*profiles.Endpoint) (TextResult, error)
}

// Backend names.
const (
	BackendEstimate    = "estimate"
	BackendTiktoken    = "tiktoken"
	BackendModelServer = "model-server"
)

// EstimateBytesPerToken is llm-d's estimate: about 4 bytes per token.
const EstimateBytesPerToken = 4

// estimateCounter is llm-d's estimate: bytes of every message's role and
// text plus the tools JSON, 4 to a token (rounded up). /v1/completions
// token-id prompts are counted exactly.
type estimateCounter struct{}

func (estimateCounter) CountText(_ context.Context, req *profiles.Request, _ []*profiles.Endpoint) (TextResult, error) {
	return TextResult{Tokens: estimateText(req), Backend: BackendEstimate}, nil
}

func estimateText(req *profiles.Request) int {
	n := len(req.Prompt) + len(req.Tools)
	for i := range req.Messages {
		n += len(req.Messages[i].Role) + len(req.Messages[i].Text)
	}
	t := (n + EstimateBytesPerToken - 1) / EstimateBytesPerToken
	return t + len(req.PromptIDs)
}
