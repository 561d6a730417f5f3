package tokenproducer

import (
	"fmt"
	"strings"
)

// Params are the token-producer plugin's parameters. Zero values mean the
// documented defaults.
type Params struct {
	// Backend counts text: estimate (default), tiktoken or model-server.
	Backend string `json:"backend,omitempty"`
	// TiktokenEncoding for the tiktoken backend (cl100k_base, o200k_base,
	// …); empty: chosen from the model name, else cl100k_base.
	TiktokenEncoding string            `json:"tiktokenEncoding,omitempty"`
	ModelServer      ModelServerParams `json:"modelServer,omitempty"`
	// Family of the image formula; empty: from the model name.
	Family string `json:"family,omitempty"`
	// MinPixels / MaxPixels override the Qwen family defaults (as the
	// served preprocessor_config.json says).
	MinPixels int `json:"minPixels,omitempty"`
	MaxPixels int `json:"maxPixels,omitempty"`
	// ImageGridPinpoints override LLaVA-NeXT's [height, width] list.
	ImageGridPinpoints [][2]int `json:"imageGridPinpoints,omitempty"`
	// ImageTokenCost weighs image tokens in Weighted (default 1): the
	// vision encoder makes an image token dearer to prefill than a text one.
	ImageTokenCost *float64 `json:"imageTokenCost,omitempty"`
	// CalibrateFromUsage applies the learned actual/estimated ratios.
	CalibrateFromUsage bool `json:"calibrateFromUsage,omitempty"`
	// OnImageError: reject (default; the request gets a 400) or default
	// (count the item at the default resolution).
	OnImageError string            `json:"onImageError,omitempty"`
	RemoteFetch  RemoteFetchParams `json:"remoteFetch,omitempty"`
	// Estimate is llm-d's estimate block.
	Estimate EstimateParams `json:"estimate,omitempty"`
	// VideoFrames: frames assumed per video (default 16), each at the
	// default resolution.
	VideoFrames int `json:"videoFrames,omitempty"`
	// AudioTokens per audio item (default 750: 30 s at Whisper's 25 tokens/s).
	AudioTokens int `json:"audioTokens,omitempty"`
	// ImageHash: sampled (default; URLs over 64 KiB are hashed from 24 KiB
	// of them, see SampledItemHash) or full (xxhash64 of the whole URL,
	// ~300 µs for a 4 MB photo's data URL).
	ImageHash string `json:"imageHash,omitempty"`
	// MaxImageHeaderBytes bounds the decoded bytes read per data URL (1 MiB).
	MaxImageHeaderBytes int `json:"maxImageHeaderBytes,omitempty"`
	// Models overrides settings per served model name.
	Models map[string]ModelParams `json:"models,omitempty"`
}

// EstimateParams mirror llm-d's `estimate` parameter block.
type EstimateParams struct {
	Image ImageEstimateParams `json:"image,omitempty"`
}

// ImageEstimateParams: llm-d's estimate.image.
type ImageEstimateParams struct {
	// Mode dynamic (default: max(1, w·h/factor)) or static (StaticToken).
	Mode    string `json:"mode,omitempty"`
	Dynamic struct {
		Factor int `json:"factor,omitempty"`
	} `json:"dynamic,omitempty"`
	// DefaultResolution for images whose size is unknown (default 1024×1024).
	DefaultResolution Resolution `json:"defaultResolution,omitempty"`
	StaticToken       int        `json:"staticToken,omitempty"`
}

// Resolution is a width and height in pixels.
type Resolution struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// ModelParams override the top-level settings for one model.
type ModelParams struct {
	Family             string   `json:"family,omitempty"`
	MinPixels          int      `json:"minPixels,omitempty"`
	MaxPixels          int      `json:"maxPixels,omitempty"`
	ImageGridPinpoints [][2]int `json:"imageGridPinpoints,omitempty"`
	ImageTokenCost     *float64 `json:"imageTokenCost,omitempty"`
}

func (p *Params) defaults() {
	if p.Backend == "" {
		p.Backend = BackendEstimate
	}
	if p.OnImageError == "" {
		p.OnImageError = "reject"
	}
	if p.Estimate.Image.Mode == "" {
		p.Estimate.Image.Mode = "dynamic"
	}
	if p.Estimate.Image.Dynamic.Factor == 0 {
		p.Estimate.Image.Dynamic.Factor = 1024
	}
	if p.Estimate.Image.DefaultResolution == (Resolution{}) {
		p.Estimate.Image.DefaultResolution = Resolution{Width: 1024, Height: 1024}
	}
	if p.Estimate.Image.StaticToken == 0 {
		p.Estimate.Image.StaticToken = llava15Tokens
	}
	if p.ImageHash == "" {
		p.ImageHash = "sampled"
	}
	if p.VideoFrames == 0 {
		p.VideoFrames = 16
	}
	if p.AudioTokens == 0 {
		p.AudioTokens = 750
	}
	p.ModelServer.defaults()
	p.RemoteFetch.defaults()
}

func (p *Params) validate() error {
	switch p.Backend {
	case BackendEstimate, BackendTiktoken, BackendModelServer:
	default:
		return fmt.Errorf("backend %q: want estimate, tiktoken or model-server", p.Backend)
	}
	switch p.OnImageError {
	case "reject", "default":
	default:
		return fmt.Errorf("onImageError %q: want reject or default", p.OnImageError)
	}
	if p.ImageHash != "full" && p.ImageHash != "sampled" {
		return fmt.Errorf("imageHash %q: want full or sampled", p.ImageHash)
	}
	ie := p.Estimate.Image
	if ie.Mode != "dynamic" && ie.Mode != "static" {
		return fmt.Errorf("estimate.image.mode %q: want dynamic or static", ie.Mode)
	}
	if ie.Dynamic.Factor <= 0 {
		return fmt.Errorf("estimate.image.dynamic.factor must be > 0, got %d", ie.Dynamic.Factor)
	}
	if ie.DefaultResolution.Width <= 0 || ie.DefaultResolution.Height <= 0 {
		return fmt.Errorf("estimate.image.defaultResolution must be positive, got %dx%d", ie.DefaultResolution.Width, ie.DefaultResolution.Height)
	}
	if ie.StaticToken < 0 || p.VideoFrames < 0 || p.AudioTokens < 0 || p.MaxImageHeaderBytes < 0 {
		return fmt.Errorf("estimate.image.staticToken, videoFrames, audioTokens and maxImageHeaderBytes must not be negative")
	}
	if p.ModelServer.URL != "" && !strings.HasPrefix(p.ModelServer.URL, "http://") && !strings.HasPrefix(p.ModelServer.URL, "https://") {
		return fmt.Errorf("modelServer.url %q: want http:// or https://", p.ModelServer.URL)
	}
	if p.ImageTokenCost != nil && *p.ImageTokenCost < 0 {
		return fmt.Errorf("imageTokenCost must be ≥ 0, got %g", *p.ImageTokenCost)
	}
	if _, err := p.imageModel("", p.Family, p.MinPixels, p.MaxPixels, p.ImageGridPinpoints); err != nil {
		return err
	}
	for name, m := range p.Models {
		if m.ImageTokenCost != nil && *m.ImageTokenCost < 0 {
			return fmt.Errorf("models[%q].imageTokenCost must be ≥ 0, got %g", name, *m.ImageTokenCost)
		}
		if _, err := p.resolve(name); err != nil {
			return fmt.Errorf("models[%q]: %w", name, err)
		}
	}
	return nil
}

// modelConf is a model's resolved image formula and cost.
type modelConf struct {
	img  ImageModel
	cost float64
}

func (p *Params) resolve(model string) (modelConf, error) {
	family, minP, maxP, pins := p.Family, p.MinPixels, p.MaxPixels, p.ImageGridPinpoints
	cost := 1.0
	if p.ImageTokenCost != nil {
		cost = *p.ImageTokenCost
	}
	m, ok := p.Models[model]
	if !ok {
		for k, v := range p.Models {
			if strings.EqualFold(k, model) {
				m, ok = v, true
				break
			}
		}
	}
	if ok {
		if m.Family != "" {
			family = m.Family
		}
		if m.MinPixels != 0 {
			minP = m.MinPixels
		}
		if m.MaxPixels != 0 {
			maxP = m.MaxPixels
		}
		if m.ImageGridPinpoints != nil {
			pins = m.ImageGridPinpoints
		}
		if m.ImageTokenCost != nil {
			cost = *m.ImageTokenCost
		}
	}
	img, err := p.imageModel(model, family, minP, maxP, pins)
	return modelConf{img: img, cost: cost}, err
}

func (p *Params) imageModel(model, family string, minP, maxP int, pins [][2]int) (ImageModel, error) {
	f := Family(strings.ToLower(family))
	if f == "" {
		f = FamilyForModel(model)
	}
	img, err := NewImageModel(f)
	if err != nil {
		return img, fmt.Errorf("family: %w", err)
	}
	if minP < 0 || maxP < 0 {
		return img, fmt.Errorf("minPixels and maxPixels must not be negative")
	}
	if minP > 0 && maxP > 0 && maxP < minP {
		return img, fmt.Errorf("maxPixels %d < minPixels %d", maxP, minP)
	}
	if img.Factor > 0 {
		if minP > 0 {
			img.MinPixels = minP
		}
		if maxP > 0 {
			img.MaxPixels = maxP
		}
		if img.MaxPixels < img.MinPixels {
			return img, fmt.Errorf("maxPixels %d < minPixels %d", img.MaxPixels, img.MinPixels)
		}
	}
	if pins != nil {
		for _, pp := range pins {
			if pp[0] <= 0 || pp[1] <= 0 {
				return img, fmt.Errorf("imageGridPinpoints must be positive [height, width] pairs, got %v", pp)
			}
		}
		img.GridPinpoints = pins
	}
	ie := p.Estimate.Image
	img.Mode, img.DynamicFactor, img.StaticTokens = ie.Mode, ie.Dynamic.Factor, ie.StaticToken
	return img, nil
}
