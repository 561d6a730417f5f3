package tokenproducer

import (
	"context"
	"fmt"
	"strings"

	"github.com/tiktoken-go/tokenizer"

	"github.com/spillway-llm/spillway/profiles"
)

// tiktokenCounter counts with an embedded offline BPE vocabulary. Chat
// messages add OpenAI's documented framing: 3 tokens per message and 3 to
// prime the reply. The tools JSON is tokenized as text.
type tiktokenCounter struct {
	codec tokenizer.Codec
	name  string
}

// newTiktoken loads encoding (cl100k_base, o200k_base, …); "" picks it from
// the model name and falls back to cl100k_base.
func newTiktoken(encoding, model string) (*tiktokenCounter, error) {
	var c tokenizer.Codec
	var err error
	if encoding != "" {
		c, err = tokenizer.Get(tokenizer.Encoding(encoding))
		if err != nil {
			return nil, fmt.Errorf("tiktoken encoding %q: %w (accepted: cl100k_base, o200k_base, p50k_base, p50k_edit, r50k_base)", encoding, err)
		}
	} else if c, err = tokenizer.ForModel(tokenizer.Model(strings.ToLower(model))); err != nil {
		c, err = tokenizer.Get(tokenizer.Cl100kBase)
		if err != nil {
			return nil, err
		}
	}
	return &tiktokenCounter{codec: c, name: c.GetName()}, nil
}

func (t *tiktokenCounter) CountText(ctx context.Context, req *profiles.Request, _ []*profiles.Endpoint) (TextResult, error) {
	ids := make([]uint32, 0, estimateText(req))
	add := func(s string) error {
		if s == "" {
			return nil
		}
		got, _, err := t.codec.Encode(s)
		if err != nil {
			return err
		}
		for _, id := range got {
			ids = append(ids, uint32(id))
		}
		return nil
	}
	framing := 0
	for i := range req.Messages {
		if err := ctx.Err(); err != nil {
			return TextResult{}, err
		}
		if err := add(req.Messages[i].Role); err != nil {
			return TextResult{}, fmt.Errorf("tiktoken: %w", err)
		}
		if err := add(req.Messages[i].Text); err != nil {
			return TextResult{}, fmt.Errorf("tiktoken: %w", err)
		}
		framing += 3
	}
	if len(req.Messages) > 0 {
		framing += 3
	}
	if err := add(req.Prompt); err != nil {
		return TextResult{}, fmt.Errorf("tiktoken: %w", err)
	}
	if err := add(string(req.Tools)); err != nil {
		return TextResult{}, fmt.Errorf("tiktoken: %w", err)
	}
	ids = append(ids, req.PromptIDs...)
	return TextResult{Tokens: len(ids) + framing, IDs: ids, Backend: BackendTiktoken}, nil
}
