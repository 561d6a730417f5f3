package tokenproducer

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spillway-llm/spillway/profiles"
)

// Breakdown is what `spillway tokens` prints.
type Breakdown struct {
	Model       string           `json:"model"`
	Family      Family           `json:"family"`
	Backend     string           `json:"backend"`
	TextTokens  int              `json:"text_tokens"`
	ImageTokens int              `json:"image_tokens"`
	Images      []BreakdownImage `json:"images"`
	Total       int              `json:"total"`
	Weighted    float64          `json:"weighted"`
}

// BreakdownImage is one multimodal item of a Breakdown.
type BreakdownImage struct {
	Kind    string `json:"kind"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	Tokens  int    `json:"tokens"`
	Default bool   `json:"default_resolution,omitempty"`
	Hash    string `json:"hash"`
}

// ParamsFromConfig returns the parameters of the first token-producer in an
// EndpointPickerConfig file (the defaults when it has none).
func ParamsFromConfig(path string) (Params, error) {
	var p Params
	data, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("reading config: %w", err)
	}
	cfg, err := profiles.ParseConfig(path, data)
	if err != nil {
		return p, err
	}
	for _, spec := range cfg.Plugins {
		if spec.Type == PluginType {
			if err := profiles.DecodeParams(spec.Parameters, &p); err != nil {
				return p, fmt.Errorf("%s: plugin %q: %w", path, spec.Name, err)
			}
			return p, nil
		}
	}
	return p, nil
}

// Explain counts one request body. model, when set, replaces the body's.
func (c *Counter) Explain(ctx context.Context, body []byte, model string) (Breakdown, error) {
	req, err := profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{}, body)
	if err != nil {
		return Breakdown{}, err
	}
	if model != "" {
		req.Model = model
	}
	tc, _, err := c.Count(ctx, req, nil)
	if err != nil {
		return Breakdown{}, err
	}
	b := Breakdown{
		Model: req.Model, Family: c.ImageModel(req.Model).Family, Backend: tc.Backend,
		TextTokens: tc.Text, ImageTokens: tc.Image, Total: tc.Total(), Weighted: tc.Weighted,
		Images: make([]BreakdownImage, len(tc.Images)),
	}
	for i, im := range tc.Images {
		b.Images[i] = BreakdownImage{Kind: req.Multimodal[i].Kind, Width: im.Width, Height: im.Height, Tokens: im.Tokens, Default: im.Default, Hash: strconv.FormatUint(im.Hash, 16)}
	}
	return b, nil
}
