package costmodel

import (
	"hash/fnv"
	"math"
	"math/bits"
	"sync"

	"github.com/spillway-llm/spillway/profiles"
)

// OutputPredictor predicts how many tokens a request will generate. It is
// deliberately swappable: the router only needs a rough size.
type OutputPredictor interface {
	Predict(req *profiles.Request) float64
	Observe(req *profiles.Request, completionTokens int)
}

// BucketPredictor keeps, per model and prompt-length bucket (powers of two),
// an exponentially weighted mean of observed completion lengths. A
// prediction is bounded by the request's max_tokens.
type BucketPredictor struct {
	// Prior is predicted before anything was observed in a bucket.
	Prior float64
	// Alpha is the EWMA weight of a new observation.
	Alpha float64
	// InjectedError, when > 0, multiplies every prediction by a factor drawn
	// deterministically per request id from [1−e, 1+e] (clamped at 0.05):
	// the benchmark's robustness test.
	InjectedError float64

	mu      sync.Mutex
	buckets map[bucketKey]*ewma
}

type bucketKey struct {
	model  string
	bucket int
}

type ewma struct {
	mean float64
	n    int
}

// NewBucketPredictor returns a predictor with the given prior.
func NewBucketPredictor(prior float64) *BucketPredictor {
	return &BucketPredictor{Prior: prior, Alpha: 0.1, buckets: map[bucketKey]*ewma{}}
}

func promptBucket(tokens int) int {
	if tokens <= 0 {
		return 0
	}
	return bits.Len(uint(tokens))
}

func promptTokens(req *profiles.Request) int {
	if req.Tokens.Counted {
		return req.Tokens.Total()
	}
	return len(req.PromptText()) / 4
}

// Predict implements OutputPredictor.
func (p *BucketPredictor) Predict(req *profiles.Request) float64 {
	k := bucketKey{req.Model, promptBucket(promptTokens(req))}
	p.mu.Lock()
	v := p.Prior
	if e := p.buckets[k]; e != nil && e.n > 0 {
		v = e.mean
	}
	p.mu.Unlock()
	if p.InjectedError > 0 {
		v *= errorFactor(req.ID, p.InjectedError)
	}
	if req.MaxTokens > 0 {
		v = math.Min(v, float64(req.MaxTokens))
	}
	return math.Max(v, 1)
}

// errorFactor is a deterministic pseudo-random factor in [1−e, 1+e].
func errorFactor(id string, e float64) float64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	u := float64(h.Sum64()>>11) / float64(1<<53) // [0,1)
	return math.Max(0.05, 1+e*(2*u-1))
}

// Observe implements OutputPredictor.
func (p *BucketPredictor) Observe(req *profiles.Request, completionTokens int) {
	if completionTokens <= 0 {
		return
	}
	k := bucketKey{req.Model, promptBucket(promptTokens(req))}
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.buckets[k]
	if e == nil {
		if len(p.buckets) > 4096 { // bounded: many models × 32 buckets
			return
		}
		e = &ewma{}
		p.buckets[k] = e
	}
	if e.n == 0 {
		e.mean = float64(completionTokens)
	} else {
		e.mean += p.Alpha * (float64(completionTokens) - e.mean)
	}
	e.n++
}
