package sim

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Profile is a calibrated hardware/model profile: the engine's scheduler
// limits, its KV-cache capacity and the constants of the step-time formula
// (see StepTime).
type Profile struct {
	Name string

	// Scheduler limits (vLLM flags).
	BlockSize           int // tokens per KV block (16)
	NumGPUBlocks        int // KV cache capacity in blocks
	MaxNumBatchedTokens int // B: token budget per step (prefill chunk + one per decode)
	MaxNumSeqs          int // running-request bound
	MaxModelLen         int // longest prompt+output accepted

	// Step-time constants. A step that prefills chunks c (each n_c new
	// tokens on top of ctx_c already-computed tokens) and decodes d sequences
	// with total context C costs
	//
	//	T = StepBase + A·Σn_c + A·AttnRatio·Σ n_c·(ctx_c + n_c/2) + DecodePerSeq·d + DecodePerCtxToken·C
	//
	// where A is derived so that a lone full chunk at zero context costs
	// exactly ChunkTime: A = (ChunkTime − StepBase) / (B + AttnRatio·B²/2).
	StepBase          time.Duration // fixed cost of any step (weights read, launch)
	ChunkTime         time.Duration // T(B): a lone B-token prefill at zero context
	AttnRatio         float64       // attention cost per token-pair relative to A
	DecodePerSeq      time.Duration // per decoding sequence
	DecodePerCtxToken time.Duration // per context token read by a decoding sequence

	// Disaggregation and encoder constants.
	KVBytesPerToken   int64   // KV bytes per token (all layers, K and V)
	TransferBandwidth float64 // bytes/s for the P→D KV pull (NIXL/RDMA)
	ImageTokens       int     // tokens one image contributes to a prompt
	EncodePerToken    time.Duration
	EncodeBytesPerTok int64 // encoder embedding bytes per image token (ec_transfer size)
	TPSize            int
	DefaultMaxTokens  int // completion length when the request sets none
}

// perToken returns A in seconds (see Profile).
func (p *Profile) perToken() float64 {
	b := float64(p.MaxNumBatchedTokens)
	return (p.ChunkTime - p.StepBase).Seconds() / (b + p.AttnRatio*b*b/2)
}

// StepTime evaluates the step-time formula for one step. prefill holds
// (newTokens, contextBefore) pairs, one per prefilling sequence.
func (p *Profile) StepTime(prefill [][2]int, decodeSeqs int, decodeCtx int64) time.Duration {
	a := p.perToken()
	s := p.StepBase.Seconds()
	for _, c := range prefill {
		n, ctx := float64(c[0]), float64(c[1])
		s += a*n + a*p.AttnRatio*n*(ctx+n/2)
	}
	s += p.DecodePerSeq.Seconds()*float64(decodeSeqs) + p.DecodePerCtxToken.Seconds()*float64(decodeCtx)
	return time.Duration(math.Round(s * 1e9))
}

// TransferTime is the P→D KV pull time for tokens tokens.
func (p *Profile) TransferTime(tokens int) time.Duration {
	if p.TransferBandwidth <= 0 {
		return 0
	}
	return time.Duration(float64(int64(tokens)*p.KVBytesPerToken) / p.TransferBandwidth * 1e9)
}

// KVBytes is the KV size of tokens tokens.
func (p *Profile) KVBytes(tokens int) int64 { return int64(tokens) * p.KVBytesPerToken }

var profiles = map[string]Profile{
	// Qwen3-32B, TP=2 on 2×H100 80GB, max-num-batched-tokens 8192: the seed's
	// calibration T(8192) = 0.40 s (20,480 prefill tok/s). KV: 64 layers × 8
	// KV heads × 128 × 2 (K,V) × 2 bytes = 256 KiB/token; ~2×(80−32−8) GB
	// free ≈ 80 GB → 19,000 blocks ≈ 300k tokens. Decode: ~12 ms per step
	// to stream the weights, 40 ns per context token of KV reads.
	// AttnRatio from the architecture's FLOP counts: a (query, key) pair
	// costs 2·64 heads·128 (QKᵀ) + 2·64·128 (PV) = 32,768 FLOPs per layer ×
	// 64 layers ≈ 2.1 MFLOP, a token's GEMMs 2 × 31.2B non-embedding params
	// ≈ 62.4 GFLOP, so attention per pair ≈ 1/29,760 of the linear cost per
	// token at equal kernel efficiency (FlashAttention-3 and the GEMMs both
	// run at ~65% of peak on H100). The earlier 1/100,000 undercounted
	// long-context prefill (a lone 128k prompt: 10.1 s instead of 17.6 s).
	"qwen3-32b-h100": {
		Name: "qwen3-32b-h100", BlockSize: 16, NumGPUBlocks: 19000, MaxNumBatchedTokens: 8192,
		MaxNumSeqs: 256, MaxModelLen: 131072,
		StepBase: 12 * time.Millisecond, ChunkTime: 400 * time.Millisecond, AttnRatio: 1.0 / 30000,
		DecodePerSeq: 200 * time.Microsecond, DecodePerCtxToken: 40 * time.Nanosecond,
		KVBytesPerToken: 262144, TransferBandwidth: 25e9,
		ImageTokens: 256, EncodePerToken: 200 * time.Microsecond, EncodeBytesPerTok: 5120 * 2,
		TPSize: 2, DefaultMaxTokens: 64,
	},
	// gpt-oss-120b (MoE, ~5B active) on 1×H100 TP=1: cheaper prefill per
	// token, small KV (36 layers × 8 KV heads × 64 × 2 × 2 bytes = 72 KiB/token,
	// half the layers sliding-window: modelled as full).
	"gpt-oss-120b-h100": {
		Name: "gpt-oss-120b-h100", BlockSize: 16, NumGPUBlocks: 40000, MaxNumBatchedTokens: 8192,
		MaxNumSeqs: 256, MaxModelLen: 131072,
		StepBase: 8 * time.Millisecond, ChunkTime: 250 * time.Millisecond, AttnRatio: 1.0 / 150000,
		DecodePerSeq: 150 * time.Microsecond, DecodePerCtxToken: 12 * time.Nanosecond,
		KVBytesPerToken: 73728, TransferBandwidth: 25e9,
		ImageTokens: 256, EncodePerToken: 150 * time.Microsecond, EncodeBytesPerTok: 2880 * 2,
		TPSize: 1, DefaultMaxTokens: 64,
	},
	// A tiny CPU model (≈0.5B on 16 cores): for demos and fast tests.
	"tiny-cpu": {
		Name: "tiny-cpu", BlockSize: 16, NumGPUBlocks: 2048, MaxNumBatchedTokens: 2048,
		MaxNumSeqs: 32, MaxModelLen: 32768,
		StepBase: 20 * time.Millisecond, ChunkTime: 1000 * time.Millisecond, AttnRatio: 1.0 / 20000,
		DecodePerSeq: 2 * time.Millisecond, DecodePerCtxToken: 200 * time.Nanosecond,
		KVBytesPerToken: 12288, TransferBandwidth: 1e9,
		ImageTokens: 64, EncodePerToken: 2 * time.Millisecond, EncodeBytesPerTok: 896 * 2,
		TPSize: 1, DefaultMaxTokens: 32,
	},
}

// DefaultProfileName is the profile used when none is named.
const DefaultProfileName = "qwen3-32b-h100"

// LookupProfile returns the named profile.
func LookupProfile(name string) (Profile, error) {
	if name == "" {
		name = DefaultProfileName
	}
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("sim: unknown profile %q (known: %v)", name, ProfileNames())
	}
	return p, nil
}

// MustProfile is LookupProfile that panics (for tests and literals).
func MustProfile(name string) Profile {
	p, err := LookupProfile(name)
	if err != nil {
		panic(err)
	}
	return p
}

// ProfileNames lists the shipped profiles.
func ProfileNames() []string {
	var n []string
	for k := range profiles {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
