package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

type pickerParams struct {
	MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
}

func (p *pickerParams) validate() error {
	if p.MaxNumOfEndpoints < 1 {
		return fmt.Errorf("maxNumOfEndpoints must be ≥ 1, got %d", p.MaxNumOfEndpoints)
	}
	return nil
}

func decodePickerParams(raw json.RawMessage) (pickerParams, error) {
	p := pickerParams{MaxNumOfEndpoints: 1}
	if err := DecodeParams(raw, &p); err != nil {
		return p, err
	}
	return p, p.validate()
}

// lockedRand is a per-picker random source; math/rand/v2's global source
// would do, but a seedable one lets the simulator be deterministic.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newLockedRand() *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

func (l *lockedRand) Float64() float64 { l.mu.Lock(); defer l.mu.Unlock(); return l.r.Float64() }
func (l *lockedRand) IntN(n int) int   { l.mu.Lock(); defer l.mu.Unlock(); return l.r.IntN(n) }

// Seed makes the picker's random choices repeatable.
func (l *lockedRand) Seed(s uint64) {
	l.mu.Lock()
	l.r = rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
	l.mu.Unlock()
}

// Seeder is implemented by plugins with random choices, so that benchmarks
// can be repeated exactly.
type Seeder interface{ Seed(uint64) }

// MaxScorePicker picks the highest total score; ties are broken at random.
type MaxScorePicker struct {
	Named
	p   pickerParams
	rnd *lockedRand
}

func init() {
	Register("max-score-picker", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		p, err := decodePickerParams(raw)
		if err != nil {
			return nil, err
		}
		return &MaxScorePicker{Named: NewNamed("max-score-picker", name), p: p, rnd: newLockedRand()}, nil
	})
	Register("random-picker", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		p, err := decodePickerParams(raw)
		if err != nil {
			return nil, err
		}
		return &RandomPicker{Named: NewNamed("random-picker", name), p: p, rnd: newLockedRand()}, nil
	})
	Register("weighted-random-picker", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		p, err := decodePickerParams(raw)
		if err != nil {
			return nil, err
		}
		return &WeightedRandomPicker{Named: NewNamed("weighted-random-picker", name), p: p, rnd: newLockedRand()}, nil
	})
	Register("round-robin-picker", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		p, err := decodePickerParams(raw)
		if err != nil {
			return nil, err
		}
		return &RoundRobinPicker{Named: NewNamed("round-robin-picker", name), p: p}, nil
	})
}

// Params implements Parameterized.
func (m *MaxScorePicker) Params() any { return m.p }

// Seed implements Seeder.
func (m *MaxScorePicker) Seed(s uint64) { m.rnd.Seed(s) }

// Pick implements Picker.
func (m *MaxScorePicker) Pick(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint, scores []float64) []*Endpoint {
	if len(eps) == 0 {
		return nil
	}
	if m.p.MaxNumOfEndpoints == 1 {
		// Single pass, reservoir-sample among ties: no allocation but the
		// result.
		best, n := 0, 0
		for i, s := range scores {
			switch {
			case s > scores[best]:
				best, n = i, 1
			case s == scores[best]:
				n++
				if n > 1 && m.rnd.IntN(n) == 0 {
					best = i
				}
			}
		}
		return []*Endpoint{eps[best]}
	}
	// Top-k selection in one pass over the candidates (k is small: the
	// primary and a few fallbacks); ties are broken by a random key.
	n := min(m.p.MaxNumOfEndpoints, len(eps))
	type cand struct {
		i   int
		s   float64
		key uint64
	}
	top := make([]cand, 0, n+1)
	better := func(a, b cand) bool { return a.s > b.s || (a.s == b.s && a.key > b.key) }
	m.rnd.mu.Lock()
	defer m.rnd.mu.Unlock()
	for i, s := range scores {
		c := cand{i: i, s: s, key: m.rnd.r.Uint64()}
		if len(top) == n && !better(c, top[n-1]) {
			continue
		}
		j := len(top)
		if j < n {
			top = append(top, c)
		} else {
			j = n - 1
		}
		for j > 0 && better(c, top[j-1]) {
			top[j] = top[j-1]
			j--
		}
		top[j] = c
	}
	out := make([]*Endpoint, len(top))
	for i, c := range top {
		out[i] = eps[c.i]
	}
	return out
}

// RandomPicker picks uniformly at random.
type RandomPicker struct {
	Named
	p   pickerParams
	rnd *lockedRand
}

// Params implements Parameterized.
func (r *RandomPicker) Params() any { return r.p }

// Seed implements Seeder.
func (r *RandomPicker) Seed(s uint64) { r.rnd.Seed(s) }

// Pick implements Picker.
func (r *RandomPicker) Pick(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint, _ []float64) []*Endpoint {
	n := min(r.p.MaxNumOfEndpoints, len(eps))
	if n == 0 {
		return nil
	}
	if n == 1 {
		return []*Endpoint{eps[r.rnd.IntN(len(eps))]}
	}
	perm := append([]*Endpoint(nil), eps...)
	for i := len(perm) - 1; i > 0; i-- {
		j := r.rnd.IntN(i + 1)
		perm[i], perm[j] = perm[j], perm[i]
	}
	return perm[:n]
}

// WeightedRandomPicker samples in proportion to score; when every score is
// ≤ 0 it picks uniformly.
type WeightedRandomPicker struct {
	Named
	p   pickerParams
	rnd *lockedRand
}

// Params implements Parameterized.
func (w *WeightedRandomPicker) Params() any { return w.p }

// Seed implements Seeder.
func (w *WeightedRandomPicker) Seed(s uint64) { w.rnd.Seed(s) }

// Pick implements Picker.
func (w *WeightedRandomPicker) Pick(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint, scores []float64) []*Endpoint {
	n := min(w.p.MaxNumOfEndpoints, len(eps))
	if n == 0 {
		return nil
	}
	weights := make([]float64, len(eps))
	copy(weights, scores)
	taken := make([]bool, len(eps))
	out := make([]*Endpoint, 0, n)
	for len(out) < n {
		sum := 0.0
		for i, v := range weights {
			if !taken[i] && v > 0 {
				sum += v
			}
		}
		choice := -1
		if sum > 0 {
			x := w.rnd.Float64() * sum
			for i, v := range weights {
				if taken[i] || v <= 0 {
					continue
				}
				choice = i
				if x -= v; x < 0 {
					break
				}
			}
		} else {
			k := w.rnd.IntN(len(eps) - len(out))
			for i := range eps {
				if taken[i] {
					continue
				}
				if k == 0 {
					choice = i
					break
				}
				k--
			}
		}
		taken[choice] = true
		out = append(out, eps[choice])
	}
	return out
}

// RoundRobinPicker cycles through the candidates in order: the Kubernetes
// Service baseline. The counter is per picker instance, so each pool's
// profile cycles independently.
type RoundRobinPicker struct {
	Named
	p    pickerParams
	next atomic.Uint64
}

// Params implements Parameterized.
func (r *RoundRobinPicker) Params() any { return r.p }

// Pick implements Picker.
func (r *RoundRobinPicker) Pick(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint, _ []float64) []*Endpoint {
	n := min(r.p.MaxNumOfEndpoints, len(eps))
	if n == 0 {
		return nil
	}
	start := int((r.next.Add(1) - 1) % uint64(len(eps)))
	out := make([]*Endpoint, n)
	for i := range out {
		out[i] = eps[(start+i)%len(eps)]
	}
	return out
}
