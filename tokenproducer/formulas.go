package tokenproducer

import (
	"fmt"
	"math"
)

// Family names an image-token formula.
type Family string

// Families.
const (
	FamilyQwen2VL   Family = "qwen2-vl"   // patch 14 × merge 2 = factor 28
	FamilyQwen25VL  Family = "qwen2.5-vl" // same formula as Qwen2-VL
	FamilyQwen3VL   Family = "qwen3-vl"   // patch 16 × merge 2 = factor 32
	FamilyLLaVA15   Family = "llava-1.5"  // CLIP 336/14: 576 per image
	FamilyLLaVANeXT Family = "llava-next" // anyres over image_grid_pinpoints
	FamilyEstimate  Family = "estimate"   // llm-d's estimate.image dynamic/static
)

// Families lists the accepted family names.
var Families = []Family{FamilyQwen2VL, FamilyQwen25VL, FamilyQwen3VL, FamilyLLaVA15, FamilyLLaVANeXT, FamilyEstimate}

// ImageModel is one model's image-token formula with its resolved
// preprocessor settings.
type ImageModel struct {
	Family Family
	// Qwen: smart_resize factor and pixel bounds.
	Factor    int
	MinPixels int
	MaxPixels int
	// WrapperTokens per image (<|vision_start|>, <|vision_end|>): counted
	// as text, they go through the LLM only.
	WrapperTokens int
	// LLaVA-NeXT: image_grid_pinpoints as [height, width] pairs.
	GridPinpoints [][2]int
	// Estimate mode.
	Mode          string // "dynamic" or "static"
	DynamicFactor int
	StaticTokens  int
}

// Defaults per family, as the served preprocessor_config.json says for the
// published checkpoints.
const (
	qwen2MinPixels = 3136
	// The Qwen2-VL processor class defaults to 1003520, but the published
	// checkpoints' preprocessor_config.json (what vLLM serves) say 12845056.
	qwen2MaxPixels = 12845056
	qwen3MinPixels = 65536    // shortest_edge
	qwen3MaxPixels = 16777216 // longest_edge
	llava15Tokens  = 576
	llavaPatches   = 24 // 336 / 14
	llavaCrop      = 336
)

// DefaultGridPinpoints is LLaVA-v1.6's image_grid_pinpoints.
var DefaultGridPinpoints = [][2]int{{336, 672}, {672, 336}, {672, 672}, {1008, 336}, {336, 1008}}

// NewImageModel returns the family's formula with its default settings.
func NewImageModel(f Family) (ImageModel, error) {
	switch f {
	case FamilyQwen2VL, FamilyQwen25VL:
		return ImageModel{Family: f, Factor: 28, MinPixels: qwen2MinPixels, MaxPixels: qwen2MaxPixels, WrapperTokens: 2}, nil
	case FamilyQwen3VL:
		return ImageModel{Family: f, Factor: 32, MinPixels: qwen3MinPixels, MaxPixels: qwen3MaxPixels, WrapperTokens: 2}, nil
	case FamilyLLaVA15:
		return ImageModel{Family: f}, nil
	case FamilyLLaVANeXT:
		return ImageModel{Family: f, GridPinpoints: DefaultGridPinpoints}, nil
	case FamilyEstimate:
		return ImageModel{Family: f, Mode: "dynamic", DynamicFactor: 1024, StaticTokens: llava15Tokens}, nil
	}
	return ImageModel{}, fmt.Errorf("unknown family %q (accepted: %v)", f, Families)
}

// Tokens returns the placeholder tokens an image of w×h pixels becomes.
// Wrapper tokens are not included (see WrapperTokens).
func (m ImageModel) Tokens(w, h int) (int, error) {
	if w <= 0 || h <= 0 {
		return 0, fmt.Errorf("image size %dx%d must be positive", w, h)
	}
	switch m.Family {
	case FamilyQwen2VL, FamilyQwen25VL, FamilyQwen3VL:
		rh, rw, err := SmartResize(h, w, m.Factor, m.MinPixels, m.MaxPixels)
		if err != nil {
			return 0, err
		}
		return rh * rw / (m.Factor * m.Factor), nil
	case FamilyLLaVA15:
		return llava15Tokens, nil
	case FamilyLLaVANeXT:
		return llavaNextTokens(h, w, m.GridPinpoints), nil
	case FamilyEstimate:
		if m.Mode == "static" {
			return m.StaticTokens, nil
		}
		return max(1, w*h/m.DynamicFactor), nil
	}
	return 0, fmt.Errorf("unknown family %q", m.Family)
}

// SmartResize is Qwen-VL's smart_resize: both sides rounded to multiples of
// factor (Python's round, half to even), then scaled into
// [minPixels, maxPixels] keeping the aspect ratio. It returns the resized
// height and width.
func SmartResize(h, w, factor, minPixels, maxPixels int) (int, int, error) {
	if factor <= 0 || minPixels <= 0 || maxPixels < minPixels {
		return 0, 0, fmt.Errorf("bad resize settings: factor %d, min_pixels %d, max_pixels %d", factor, minPixels, maxPixels)
	}
	lo, hi := min(h, w), max(h, w)
	if float64(hi)/float64(lo) > 200 {
		return 0, 0, fmt.Errorf("absolute aspect ratio must be smaller than 200, got %d:%d (%dx%d)", hi, lo, w, h)
	}
	f := float64(factor)
	fh, fw := float64(h), float64(w)
	hBar := int(math.RoundToEven(fh/f)) * factor
	wBar := int(math.RoundToEven(fw/f)) * factor
	switch {
	case hBar*wBar > maxPixels:
		beta := math.Sqrt(fh * fw / float64(maxPixels))
		hBar = max(factor, int(math.Floor(fh/beta/f))*factor)
		wBar = max(factor, int(math.Floor(fw/beta/f))*factor)
	case hBar*wBar < minPixels:
		beta := math.Sqrt(float64(minPixels) / (fh * fw))
		hBar = int(math.Ceil(fh*beta/f)) * factor
		wBar = int(math.Ceil(fw*beta/f)) * factor
	}
	return hBar, wBar, nil
}

// llavaNextTokens follows the HF LLaVA-NeXT processor: the best-fitting
// pinpoint resolution, the unpadded feature grid of the image inside it, one
// newline feature per grid row, plus the 576 base features of the
// downscaled whole image.
func llavaNextTokens(h, w int, pinpoints [][2]int) int {
	if len(pinpoints) == 0 {
		pinpoints = DefaultGridPinpoints
	}
	bh, bw := selectBestResolution(h, w, pinpoints)
	scaleH, scaleW := bh/llavaCrop, bw/llavaCrop
	curH, curW := llavaPatches*scaleH, llavaPatches*scaleW
	origAspect := float64(w) / float64(h)
	curAspect := float64(curW) / float64(curH)
	if origAspect > curAspect {
		newH := int(roundTo(float64(h)*(float64(curW)/float64(w)), 7))
		pad := (curH - newH) / 2
		curH -= pad * 2
	} else {
		newW := int(roundTo(float64(w)*(float64(curH)/float64(h)), 7))
		pad := (curW - newW) / 2
		curW -= pad * 2
	}
	return curH*curW + curH + llavaPatches*llavaPatches
}

func roundTo(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.RoundToEven(x*p) / p
}

func selectBestResolution(h, w int, pinpoints [][2]int) (int, int) {
	var best [2]int
	maxEff, minWaste := 0, math.MaxInt
	for _, p := range pinpoints {
		ph, pw := p[0], p[1]
		scale := math.Min(float64(pw)/float64(w), float64(ph)/float64(h))
		dw, dh := int(float64(w)*scale), int(float64(h)*scale)
		eff := min(dw*dh, w*h)
		waste := pw*ph - eff
		if eff > maxEff || (eff == maxEff && waste < minWaste) {
			maxEff, minWaste, best = eff, waste, p
		}
	}
	if best == ([2]int{}) {
		return pinpoints[0][0], pinpoints[0][1]
	}
	return best[0], best[1]
}

// VideoTokens is the documented estimate for a video whose frames are
// unknown: frames sampled at the default resolution, Qwen families merging
// two frames per temporal patch.
func (m ImageModel) VideoTokens(frames, w, h int) (int, error) {
	per, err := m.Tokens(w, h)
	if err != nil {
		return 0, err
	}
	switch m.Family {
	case FamilyQwen2VL, FamilyQwen25VL, FamilyQwen3VL:
		return (frames + 1) / 2 * per, nil
	}
	return frames * per, nil
}
