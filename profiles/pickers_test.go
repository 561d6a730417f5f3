package profiles_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/spillway-llm/spillway/profiles"
)

// newPicker builds a registered picker with parameters (JSON) and a fixed seed.
func newPicker(t *testing.T, typ, params string, seed uint64) profiles.Picker {
	t.Helper()
	f, ok := profiles.Lookup(typ)
	if !ok {
		t.Fatalf("%s not registered", typ)
	}
	var raw json.RawMessage
	if params != "" {
		raw = json.RawMessage(params)
	}
	p, err := f(typ, raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := p.(profiles.Seeder); ok {
		s.Seed(seed)
	}
	return p.(profiles.Picker)
}

func endpoints(n int) []*profiles.Endpoint {
	eps := make([]*profiles.Endpoint, n)
	for i := range eps {
		eps[i] = profiles.NewEndpoint(i, fmt.Sprintf("ep%d", i), fmt.Sprintf("10.0.0.%d:8000", i+1), nil)
	}
	return eps
}

// counts picks n times and tallies the first target by endpoint index.
func counts(p profiles.Picker, eps []*profiles.Endpoint, scores []float64, n int) []int {
	c := make([]int, len(eps))
	for range n {
		got := p.Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, scores)
		c[got[0].Index]++
	}
	return c
}

func TestMaxScorePickerPicksMax(t *testing.T) {
	eps := endpoints(4)
	p := newPicker(t, "max-score-picker", "", 1)
	c := counts(p, eps, []float64{0.1, 0.9, 0.3, 0.2}, 50)
	if c[1] != 50 {
		t.Fatalf("max not always picked: %v", c)
	}
}

func TestMaxScorePickerBreaksTiesRandomly(t *testing.T) {
	eps := endpoints(4)
	p := newPicker(t, "max-score-picker", "", 7)
	const n = 3000
	c := counts(p, eps, []float64{0.5, 1, 1, 1}, n)
	if c[0] != 0 {
		t.Fatalf("lower score picked: %v", c)
	}
	for i := 1; i < 4; i++ {
		// Each of three tied endpoints expects n/3 = 1000; ±15% is ~8σ.
		if math.Abs(float64(c[i])-n/3) > 0.15*n/3 {
			t.Fatalf("ties not broken uniformly: %v", c)
		}
	}
}

func TestMaxScorePickerTopN(t *testing.T) {
	eps := endpoints(5)
	p := newPicker(t, "max-score-picker", `{"maxNumOfEndpoints": 3}`, 3)
	scores := []float64{0.2, 0.9, 0.1, 0.7, 0.8}
	got := p.Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, scores)
	if len(got) != 3 || got[0] != eps[1] || got[1] != eps[4] || got[2] != eps[3] {
		t.Fatalf("top 3 = %v, want ep1, ep4, ep3", got)
	}
	// Asking for more than exist returns each endpoint once.
	p = newPicker(t, "max-score-picker", `{"maxNumOfEndpoints": 9}`, 3)
	got = p.Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, scores)
	if len(got) != 5 || !distinct(got) {
		t.Fatalf("got %v", got)
	}
}

func distinct(eps []*profiles.Endpoint) bool {
	seen := map[*profiles.Endpoint]bool{}
	for _, e := range eps {
		if seen[e] {
			return false
		}
		seen[e] = true
	}
	return true
}

func TestRoundRobinPickerCycles(t *testing.T) {
	eps := endpoints(3)
	p := newPicker(t, "round-robin-picker", "", 0)
	var order []int
	for range 7 {
		got := p.Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, make([]float64, 3))
		order = append(order, got[0].Index)
	}
	if fmt.Sprint(order) != "[0 1 2 0 1 2 0]" {
		t.Fatalf("order %v", order)
	}
	p = newPicker(t, "round-robin-picker", `{"maxNumOfEndpoints": 2}`, 0)
	var pairs []string
	for range 3 {
		got := p.Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, nil)
		pairs = append(pairs, fmt.Sprint(got[0].Index, got[1].Index))
	}
	if fmt.Sprint(pairs) != "[0 1 1 2 2 0]" {
		t.Fatalf("pairs %v", pairs)
	}
}

func TestWeightedRandomPickerProportional(t *testing.T) {
	eps := endpoints(5)
	p := newPicker(t, "weighted-random-picker", "", 42)
	scores := []float64{1, 2, 3, 4, 0}
	const n = 20000
	c := counts(p, eps, scores, n)
	for i, s := range scores {
		want := s / 10 * n
		// Binomial σ ≤ √(n/4) ≈ 71; allow 5σ.
		if math.Abs(float64(c[i])-want) > 350 {
			t.Fatalf("endpoint %d picked %d times, want ≈%.0f (all: %v)", i, c[i], want, c)
		}
	}
	if c[4] != 0 {
		t.Fatalf("zero-score endpoint picked %d times", c[4])
	}
}

func TestWeightedRandomPickerAllZeroIsUniform(t *testing.T) {
	eps := endpoints(4)
	p := newPicker(t, "weighted-random-picker", "", 5)
	const n = 4000
	c := counts(p, eps, []float64{0, -1, 0, 0}, n)
	for i := range c {
		if math.Abs(float64(c[i])-n/4) > 0.15*n/4 {
			t.Fatalf("not uniform: %v", c)
		}
	}
}

func TestWeightedRandomPickerMany(t *testing.T) {
	eps := endpoints(4)
	p := newPicker(t, "weighted-random-picker", `{"maxNumOfEndpoints": 4}`, 9)
	for range 100 {
		got := p.Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, []float64{1, 0, 3, 2})
		if len(got) != 4 || !distinct(got) {
			t.Fatalf("got %v", got)
		}
		// The zero-score endpoint can only come last.
		if got[3] != eps[1] {
			t.Fatalf("zero-score endpoint before a positive one: %v", got)
		}
	}
}

func TestRandomPicker(t *testing.T) {
	eps := endpoints(4)
	p := newPicker(t, "random-picker", "", 11)
	const n = 4000
	// Scores are ignored.
	c := counts(p, eps, []float64{100, 0, 0, 0}, n)
	for i := range c {
		if math.Abs(float64(c[i])-n/4) > 0.15*n/4 {
			t.Fatalf("not uniform: %v", c)
		}
	}
	p = newPicker(t, "random-picker", `{"maxNumOfEndpoints": 3}`, 11)
	for range 50 {
		if got := p.Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, eps, nil); len(got) != 3 || !distinct(got) {
			t.Fatalf("got %v", got)
		}
	}
}

func TestSeedRepeatable(t *testing.T) {
	eps := endpoints(6)
	scores := []float64{1, 1, 1, 1, 1, 1}
	for _, typ := range []string{"max-score-picker", "random-picker", "weighted-random-picker"} {
		a := counts(newPicker(t, typ, "", 99), eps, scores, 200)
		b := counts(newPicker(t, typ, "", 99), eps, scores, 200)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s: same seed, different picks: %v vs %v", typ, a, b)
		}
	}
}

func TestPickersEmpty(t *testing.T) {
	for _, typ := range []string{"max-score-picker", "random-picker", "weighted-random-picker", "round-robin-picker"} {
		if got := newPicker(t, typ, "", 1).Pick(context.Background(), &profiles.CycleState{}, &profiles.Request{}, nil, nil); len(got) != 0 {
			t.Errorf("%s picked %v from nothing", typ, got)
		}
	}
}
