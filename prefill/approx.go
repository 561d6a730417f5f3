package prefill

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/spillway-llm/spillway/profiles"
)

// ApproxType is the approximate prefix producer's plugin type.
const ApproxType = "approx-prefix-cache-producer"

func init() { profiles.Register(ApproxType, newApprox) }

// ApproxParams are approx-prefix-cache-producer's parameters.
type ApproxParams struct {
	BlockSizeTokens        int  `json:"blockSizeTokens"`
	LRUCapacityPerServer   int  `json:"lruCapacityPerServer"`
	MaxPrefixTokensToMatch int  `json:"maxPrefixTokensToMatch"`
	MaxPrefixBlocksToMatch int  `json:"maxPrefixBlocksToMatch"`
	AutoTune               bool `json:"autoTune"`
	// RecordProfiles names the profiles whose target endpoint gets the
	// request's blocks at dispatch; empty = every profile that picked (in
	// P/D both the prefill endpoint that computes the KV and the decode
	// endpoint that receives it).
	RecordProfiles []string `json:"recordProfiles,omitempty"`
}

// DefaultApproxParams are the llm-d defaults.
func DefaultApproxParams() ApproxParams {
	return ApproxParams{BlockSizeTokens: 16, LRUCapacityPerServer: 31250, MaxPrefixTokensToMatch: 131072, MaxPrefixBlocksToMatch: 2048}
}

func (p *ApproxParams) validate() error {
	switch {
	case p.BlockSizeTokens < 1:
		return fmt.Errorf("blockSizeTokens must be ≥ 1, got %d", p.BlockSizeTokens)
	case p.LRUCapacityPerServer < 1:
		return fmt.Errorf("lruCapacityPerServer must be ≥ 1, got %d", p.LRUCapacityPerServer)
	case p.MaxPrefixTokensToMatch < 0:
		return fmt.Errorf("maxPrefixTokensToMatch must be ≥ 0 (0 = no limit), got %d", p.MaxPrefixTokensToMatch)
	case p.MaxPrefixBlocksToMatch < 0:
		return fmt.Errorf("maxPrefixBlocksToMatch must be ≥ 0 (0 = no limit), got %d", p.MaxPrefixBlocksToMatch)
	}
	for _, r := range p.RecordProfiles {
		if r == "" {
			return fmt.Errorf("recordProfiles: empty profile name")
		}
	}
	return nil
}

// maxBlocks is the effective block limit: the tighter of the two limits.
func maxBlocks(blockSize, maxTokens, maxBlocks int) int {
	n := maxBlocks
	if maxTokens > 0 {
		t := max(maxTokens/blockSize, 1)
		if n == 0 || t < n {
			n = t
		}
	}
	return n
}

// ApproxProducer estimates each endpoint's prefix cache from the router's
// own routing history: a request's blocks are recorded on the endpoints it
// was dispatched to.
type ApproxProducer struct {
	profiles.Named
	p        ApproxParams
	idx      *Index
	m        *prefixMetrics
	stateKey string
	// block size in use; autoTune may replace the configured one with the
	// engines' (vllm:cache_config_info) once, before anything is indexed.
	blockSize atomic.Int64
	keysKey   atomic.Pointer[string]
}

func newApprox(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := DefaultApproxParams()
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return NewApproxProducer(name, p, h), nil
}

// NewApproxProducer builds the producer (tests, the simulator).
func NewApproxProducer(name string, p ApproxParams, h profiles.Handle) *ApproxProducer {
	a := &ApproxProducer{Named: profiles.NewNamed(ApproxType, name), p: p, idx: NewIndex(p.LRUCapacityPerServer)}
	a.TN.Type = ApproxType
	a.idx.SetPrefixClosed(true)
	a.stateKey = matchKeyOf(a.TN.Name)
	a.m = newPrefixMetrics(h.Registerer(), a.TN.Name)
	a.setBlockSize(p.BlockSizeTokens)
	return a
}

func (a *ApproxProducer) setBlockSize(b int) {
	a.blockSize.Store(int64(b))
	k := keysStateKey(b, a.limit(b))
	a.keysKey.Store(&k)
}

func (a *ApproxProducer) limit(b int) int {
	return maxBlocks(b, a.p.MaxPrefixTokensToMatch, a.p.MaxPrefixBlocksToMatch)
}

// Params implements profiles.Parameterized.
func (a *ApproxProducer) Params() any { return a.p }

// Describe implements profiles.Describer.
func (a *ApproxProducer) Describe() []string {
	b := int(a.blockSize.Load())
	rec := "every profile that picked"
	if len(a.p.RecordProfiles) > 0 {
		rec = fmt.Sprint(a.p.RecordProfiles)
	}
	return []string{
		fmt.Sprintf("matches at most %d blocks of %d tokens (%d tokens); index bound %d blocks per endpoint", a.limit(b), b, a.limit(b)*b, a.p.LRUCapacityPerServer),
		"records dispatched blocks on the targets of: " + rec,
	}
}

// Order implements profiles.ProducerOrder: after the token producer.
func (a *ApproxProducer) Order() int { return 20 }

// Index exposes the index (tests, benchmarks).
func (a *ApproxProducer) Index() *Index { return a.idx }

// BlockSize returns the block size in use.
func (a *ApproxProducer) BlockSize() int { return int(a.blockSize.Load()) }

// Produce implements profiles.Producer: hash once, match every candidate.
func (a *ApproxProducer) Produce(_ context.Context, req *profiles.Request, eps []*profiles.Endpoint) error {
	if a.p.AutoTune && a.idx.Blocks() == 0 {
		for _, e := range eps {
			if bs := e.Metrics().BlockSize; bs > 0 && bs != a.BlockSize() {
				a.setBlockSize(bs)
				break
			}
		}
	}
	b := a.BlockSize()
	rk := keysFor(req, b, a.limit(b), *a.keysKey.Load())
	m := &Match{Producer: a.TN.Name, BlockSize: b, TotalBlocks: len(rk.Keys), PromptTokens: rk.PromptTokens}
	m.matched = make([]int32, maxIndex(eps)+1)
	if len(rk.Keys) > 0 {
		a.idx.Match(rk.Keys, m.matched)
		best := int32(0)
		for _, e := range eps {
			best = max(best, m.matched[e.Index])
		}
		a.m.lookups.Add(float64(len(rk.Keys)))
		a.m.hits.Add(float64(best))
	}
	storeMatch(req, a.stateKey, m)
	return nil
}

// OnDispatch implements profiles.DispatchHook: the targets of the recorded
// profiles will hold the request's KV.
func (a *ApproxProducer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	if res == nil {
		return
	}
	b := a.BlockSize()
	rk := keysFor(req, b, a.limit(b), *a.keysKey.Load())
	if len(rk.Keys) == 0 {
		return
	}
	var seen [4]*profiles.Endpoint
	done := seen[:0]
	record := func(ep *profiles.Endpoint) {
		if ep == nil || slices.Contains(done, ep) {
			return
		}
		done = append(done, ep)
		if a.p.AutoTune {
			if m := ep.Metrics(); m.NumGPUBlocks > 0 && m.BlockSize > 0 {
				a.idx.SetCapacity(ep.Index, max(1, m.NumGPUBlocks*m.BlockSize/b))
			}
		}
		a.idx.Add(ep.Index, rk.Keys, nil)
	}
	if len(a.p.RecordProfiles) > 0 {
		for _, name := range a.p.RecordProfiles {
			record(res.Target(name))
		}
	} else {
		// Deterministic order: primary first, then the rest.
		record(res.Target(res.Primary))
		for name := range res.Profiles {
			record(res.Target(name))
		}
	}
	a.m.blocks.Set(float64(a.idx.Blocks()))
}

// OnEndpointAdded implements profiles.EndpointsHook.
func (a *ApproxProducer) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook: its cache is gone.
func (a *ApproxProducer) OnEndpointRemoved(ep *profiles.Endpoint) {
	a.idx.Drop(ep.Index)
	a.m.blocks.Set(float64(a.idx.Blocks()))
}
