package workloads

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"

	"sigs.k8s.io/yaml"
)

// Spec is a workload spec as written in YAML.
type Spec struct {
	Name          string         `json:"name"`
	Description   string         `json:"description,omitempty"`
	Seed          uint64         `json:"seed,omitempty"`
	Model         string         `json:"model,omitempty"`
	SystemPrompts SystemPrompts  `json:"systemPrompts"`
	Conversations Conversations  `json:"conversations"`
	Sampling      string         `json:"sampling,omitempty"`
	Repeat        int            `json:"repeat,omitempty"`
	Classes       []Class        `json:"classes,omitempty"`
	Arrival       Arrival        `json:"arrival"`
	SLO           SLO            `json:"slo"`
	Knee          Knee           `json:"knee"`
	Fleet         string         `json:"fleet,omitempty"`
	Extra         map[string]any `json:"x,omitempty"` // free-form notes, ignored
}

// SystemPrompts describes the pool of shared prefixes.
type SystemPrompts struct {
	Count  int  `json:"count"`
	Tokens Dist `json:"tokens"`
}

// Conversations describes the conversation corpus.
type Conversations struct {
	Count          int     `json:"count,omitempty"`
	PerConcurrency float64 `json:"perConcurrency,omitempty"`
	Turns          Dist    `json:"turns"`
	InputTokens    Dist    `json:"inputTokens"`
	OutputTokens   Dist    `json:"outputTokens"`
	MaxTokens      int     `json:"maxTokens,omitempty"`
	// MaxContextTokens ends a conversation early rather than let its
	// prompt plus output exceed the model's context (0 = no limit).
	MaxContextTokens int     `json:"maxContextTokens,omitempty"`
	Images           *Images `json:"images,omitempty"`
}

// Images adds images to each turn.
type Images struct {
	Count Dist        `json:"count"`
	Pool  int         `json:"pool,omitempty"`
	Sizes []ImageSize `json:"sizes"`
}

// ImageSize is one resolution images are drawn from.
type ImageSize struct {
	Width  int     `json:"width"`
	Height int     `json:"height"`
	Weight float64 `json:"weight,omitempty"`
}

// Class is an SLO class; its distributions override the conversation's.
type Class struct {
	Name         string  `json:"name"`
	Weight       float64 `json:"weight,omitempty"`
	InputTokens  *Dist   `json:"inputTokens,omitempty"`
	OutputTokens *Dist   `json:"outputTokens,omitempty"`
	Turns        *Dist   `json:"turns,omitempty"`
	SLO          *SLO    `json:"slo,omitempty"`
}

// Arrival modes.
const (
	ModePoisson = "poisson"
	ModeBursty  = "bursty"
	ModeClosed  = "closed"
)

// Arrival describes how load is offered at each level.
type Arrival struct {
	Mode            string    `json:"mode"`
	Levels          []float64 `json:"levels"`
	DurationSeconds float64   `json:"durationSeconds,omitempty"`
	// Ramp plays the levels back to back on one fleet (caches stay warm,
	// as in a QPS ramp); otherwise every level is an independent run on a
	// fresh fleet.
	Ramp  bool   `json:"ramp,omitempty"`
	Burst *Burst `json:"burst,omitempty"`
}

// Burst modulates a Poisson process: for dutyCycle of every period the rate
// is factor × level, the rest of the time it is lowered so the mean stays
// at level.
type Burst struct {
	Factor        float64 `json:"factor"`
	PeriodSeconds float64 `json:"periodSeconds"`
	DutyCycle     float64 `json:"dutyCycle"`
}

// SLO is a latency objective per request.
type SLO struct {
	TTFTMs float64 `json:"ttftMs,omitempty"`
	TPOTMs float64 `json:"tpotMs,omitempty"`
}

// Knee metrics.
const (
	KneeTTFTP90 = "ttft_p90"
	KneeTPOTP90 = "tpot_p90"
	KneeE2EP90  = "e2e_p90"
)

// Knee defines where a configuration's operating range ends: the first load
// level whose metric exceeds the bound.
type Knee struct {
	Metric  string  `json:"metric,omitempty"`
	BoundMs float64 `json:"boundMs,omitempty"`
}

// Dist is an integer distribution: {value} fixed, {min,max} uniform,
// {min,max,mean} shifted exponential truncated to [min,max].
type Dist struct {
	Value int `json:"value,omitempty"`
	Min   int `json:"min,omitempty"`
	Max   int `json:"max,omitempty"`
	Mean  int `json:"mean,omitempty"`
}

func (d Dist) validate(field string, allowZero bool) error {
	switch {
	case d.Value < 0 || d.Min < 0 || d.Max < 0 || d.Mean < 0:
		return fmt.Errorf("%s: values must not be negative", field)
	case d.Value != 0 && (d.Min != 0 || d.Max != 0 || d.Mean != 0):
		return fmt.Errorf("%s: give either value or min/max[/mean], not both", field)
	case d.Value == 0 && d.Max == 0 && !allowZero:
		return fmt.Errorf("%s: required ({value: N} or {min: A, max: B[, mean: M]})", field)
	case d.Value == 0 && d.Max < d.Min:
		return fmt.Errorf("%s: max (%d) < min (%d)", field, d.Max, d.Min)
	case d.Mean != 0 && (d.Mean < d.Min || d.Mean > d.Max):
		return fmt.Errorf("%s: mean %d outside [min %d, max %d]", field, d.Mean, d.Min, d.Max)
	}
	return nil
}

// Sample draws from the distribution.
func (d Dist) Sample(r *rand.Rand) int {
	switch {
	case d.Value != 0 || d.Max == 0:
		return d.Value
	case d.Mean == 0:
		return d.Min + r.IntN(d.Max-d.Min+1)
	default:
		v := float64(d.Min) + r.ExpFloat64()*float64(d.Mean-d.Min)
		return int(math.Min(math.Round(v), float64(d.Max)))
	}
}

// Expected returns the distribution's nominal mean (before truncation).
func (d Dist) Expected() float64 {
	switch {
	case d.Value != 0 || d.Max == 0:
		return float64(d.Value)
	case d.Mean == 0:
		return float64(d.Min+d.Max) / 2
	default:
		return float64(d.Mean)
	}
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// Parse decodes and validates a spec; file names the source in errors.
func Parse(file string, data []byte) (*Spec, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %v (see `go doc github.com/spillway-llm/spillway/test/workloads` for the format)", file, err)
	}
	s.defaults()
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &s, nil
}

func (s *Spec) defaults() {
	if s.Model == "" {
		s.Model = "sim-model"
	}
	if s.Sampling == "" {
		s.Sampling = "random"
	}
	if s.Repeat == 0 {
		s.Repeat = 1
	}
	if s.Conversations.Turns == (Dist{}) {
		s.Conversations.Turns = Dist{Value: 1}
	}
	if s.Conversations.PerConcurrency == 0 {
		s.Conversations.PerConcurrency = 1
	}
	if s.Knee.Metric == "" {
		s.Knee.Metric = KneeTTFTP90
	}
	if s.Knee.BoundMs == 0 {
		s.Knee.BoundMs = s.SLO.TTFTMs
	}
	if s.Images() != nil && s.Conversations.Images.Pool == 0 {
		s.Conversations.Images.Pool = 1 << 30
	}
}

// Images returns the image settings, nil when the workload is text only.
func (s *Spec) Images() *Images { return s.Conversations.Images }

// Validate checks the spec; errors name the field.
func (s *Spec) Validate() error {
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("name: %q must match %s", s.Name, nameRE)
	}
	if s.SystemPrompts.Count < 0 {
		return fmt.Errorf("systemPrompts.count: must be ≥ 0")
	}
	if err := s.SystemPrompts.Tokens.validate("systemPrompts.tokens", true); err != nil {
		return err
	}
	c := s.Conversations
	if c.Count < 0 || c.PerConcurrency < 0 || c.MaxTokens < 0 || c.MaxContextTokens < 0 {
		return fmt.Errorf("conversations: count, perConcurrency and maxTokens must be ≥ 0")
	}
	if err := c.Turns.validate("conversations.turns", false); err != nil {
		return err
	}
	if c.Turns.Value == 0 && c.Turns.Min < 1 {
		return fmt.Errorf("conversations.turns: min must be ≥ 1")
	}
	if err := c.InputTokens.validate("conversations.inputTokens", false); err != nil {
		return err
	}
	if err := c.OutputTokens.validate("conversations.outputTokens", false); err != nil {
		return err
	}
	if im := c.Images; im != nil {
		if err := im.Count.validate("conversations.images.count", false); err != nil {
			return err
		}
		if len(im.Sizes) == 0 {
			return fmt.Errorf("conversations.images.sizes: at least one size is required")
		}
		for i, sz := range im.Sizes {
			if sz.Width <= 0 || sz.Height <= 0 || sz.Weight < 0 {
				return fmt.Errorf("conversations.images.sizes[%d]: width and height must be > 0, weight ≥ 0", i)
			}
		}
		if im.Pool < 0 {
			return fmt.Errorf("conversations.images.pool: must be ≥ 0")
		}
	}
	switch s.Sampling {
	case "random", "sequential":
	default:
		return fmt.Errorf("sampling: %q is not one of random, sequential", s.Sampling)
	}
	if s.Repeat < 1 || s.Repeat > 1000 {
		return fmt.Errorf("repeat: must be in [1, 1000], got %d", s.Repeat)
	}
	for i, cl := range s.Classes {
		if cl.Name == "" || cl.Weight < 0 {
			return fmt.Errorf("classes[%d]: name is required and weight must be ≥ 0", i)
		}
		for _, d := range []struct {
			n string
			d *Dist
		}{{"inputTokens", cl.InputTokens}, {"outputTokens", cl.OutputTokens}, {"turns", cl.Turns}} {
			if d.d != nil {
				if err := d.d.validate(fmt.Sprintf("classes[%d].%s", i, d.n), false); err != nil {
					return err
				}
			}
		}
	}
	a := s.Arrival
	switch a.Mode {
	case ModePoisson, ModeBursty:
		if a.DurationSeconds <= 0 {
			return fmt.Errorf("arrival.durationSeconds: must be > 0 for mode %s", a.Mode)
		}
	case ModeClosed:
		if a.Ramp {
			return fmt.Errorf("arrival.ramp: only open-loop (poisson, bursty) levels can be ramped")
		}
		for _, l := range a.Levels {
			if l != math.Trunc(l) {
				return fmt.Errorf("arrival.levels: closed-loop levels are concurrencies and must be integers, got %g", l)
			}
		}
	default:
		return fmt.Errorf("arrival.mode: %q is not one of poisson, bursty, closed", a.Mode)
	}
	if a.Mode == ModeBursty {
		b := a.Burst
		if b == nil || b.Factor < 1 || b.PeriodSeconds <= 0 || b.DutyCycle <= 0 || b.DutyCycle >= 1 || b.Factor*b.DutyCycle > 1 {
			return fmt.Errorf("arrival.burst: bursty mode needs factor ≥ 1, periodSeconds > 0, 0 < dutyCycle < 1 and factor × dutyCycle ≤ 1")
		}
	}
	if len(a.Levels) == 0 || len(a.Levels) > 100 {
		return fmt.Errorf("arrival.levels: give 1 to 100 load levels")
	}
	for i, l := range a.Levels {
		if l <= 0 || (i > 0 && l <= a.Levels[i-1]) {
			return fmt.Errorf("arrival.levels: must be positive and increasing, got %v", a.Levels)
		}
	}
	if s.SLO.TTFTMs < 0 || s.SLO.TPOTMs < 0 {
		return fmt.Errorf("slo: values must be ≥ 0")
	}
	switch s.Knee.Metric {
	case KneeTTFTP90, KneeTPOTP90, KneeE2EP90:
	default:
		return fmt.Errorf("knee.metric: %q is not one of ttft_p90, tpot_p90, e2e_p90", s.Knee.Metric)
	}
	if s.Knee.BoundMs <= 0 {
		return fmt.Errorf("knee.boundMs: must be > 0 (or set slo.ttftMs)")
	}
	return nil
}
