package tokenproducer

import (
	"math"
	"slices"
	"sync"
)

// Calibration learns, per model, how far the estimate is from what the
// engine reports (usage.prompt_tokens). Text-only requests give the text
// ratio r_t = actual / text. Image-bearing requests give the image ratio
// r_i = (actual − text·r_t) / image: the text part is corrected by what
// text-only traffic taught, the rest is laid on the images. Each ratio is
// the median of the last CalibrationWindow samples, each clipped to
// [MinRatio, MaxRatio], so one odd response (a truncated prompt, a cached
// template) cannot swing it. A ratio applies after CalibrationMinSamples.
type Calibration struct {
	mu     sync.Mutex
	models map[string]*modelCal
}

// Calibration bounds.
const (
	CalibrationWindow     = 31
	CalibrationMinSamples = 3
	MinRatio              = 0.2
	MaxRatio              = 5.0
	// MaxCalibratedModels bounds the per-model state (model names come from
	// clients); further models share OtherModel.
	MaxCalibratedModels = 64
	OtherModel          = "other"
)

type ratioWindow struct {
	buf    [CalibrationWindow]float64
	n      int // samples seen (capped at the window)
	next   int
	median float64
}

func (w *ratioWindow) add(r float64) {
	w.buf[w.next] = r
	w.next = (w.next + 1) % CalibrationWindow
	if w.n < CalibrationWindow {
		w.n++
	}
	s := slices.Clone(w.buf[:w.n])
	slices.Sort(s)
	if w.n%2 == 1 {
		w.median = s[w.n/2]
	} else {
		w.median = (s[w.n/2-1] + s[w.n/2]) / 2
	}
}

func (w *ratioWindow) factor() float64 {
	if w.n < CalibrationMinSamples {
		return 1
	}
	return w.median
}

type modelCal struct{ text, image ratioWindow }

// NewCalibration returns empty calibration state.
func NewCalibration() *Calibration { return &Calibration{models: map[string]*modelCal{}} }

func (c *Calibration) model(name string, create bool) *modelCal {
	m := c.models[name]
	if m == nil && create {
		if len(c.models) >= MaxCalibratedModels {
			name = OtherModel
			if m = c.models[name]; m != nil {
				return m
			}
		}
		m = &modelCal{}
		c.models[name] = m
	}
	return m
}

// Key returns the label a model's calibration is kept under.
func (c *Calibration) Key(model string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.models[model]; ok || len(c.models) < MaxCalibratedModels {
		return model
	}
	return OtherModel
}

func clip(r float64) float64 {
	if math.IsNaN(r) {
		return 1
	}
	return math.Min(MaxRatio, math.Max(MinRatio, r))
}

// Observe records one response: the uncalibrated text and image counts and
// the prompt tokens the engine reported. It returns which ratio was
// updated ("text" or "image") and its new value; "" when nothing could be
// learned.
func (c *Calibration) Observe(model string, text, image, actual int) (kind string, ratio float64) {
	if actual <= 0 || text+image <= 0 {
		return "", 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.model(model, true)
	if image == 0 {
		m.text.add(clip(float64(actual) / float64(text)))
		return "text", m.text.factor()
	}
	rest := float64(actual) - float64(text)*m.text.factor()
	m.image.add(clip(rest / float64(image)))
	return "image", m.image.factor()
}

// Factors returns the text and image ratios for a model (1 until learned).
func (c *Calibration) Factors(model string) (text, image float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.model(model, false)
	if m == nil {
		if len(c.models) >= MaxCalibratedModels {
			m = c.models[OtherModel]
		}
		if m == nil {
			return 1, 1
		}
	}
	return m.text.factor(), m.image.factor()
}
