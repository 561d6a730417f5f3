package prefill

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
	"github.com/spillway-llm/spillway/profiles"
)

// Block keys are chained: key(i) = H(key(i−1), tokens of block i), key(−1)
// = the request's seed (model, cache salt). A block's key therefore names
// the whole prefix up to and including it, and "the first k blocks match"
// is "key(k−1) is indexed". The hash is xxhash64's round function applied
// directly to the uint32 token ids (two ids per 64-bit lane, four
// accumulators seeded from the parent key): no byte conversion, no
// allocation, ~3 ns per 16-token block. It is not cryptographic; a
// collision only costs a mis-estimated cache hit.

const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

func round(acc, input uint64) uint64 {
	acc += input * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

func mergeRound(acc, val uint64) uint64 {
	val = round(0, val)
	acc ^= val
	return acc*prime1 + prime4
}

// chainBlock returns the key of a block whose parent key is parent.
func chainBlock(parent uint64, toks []uint32) uint64 {
	n := len(toks)
	var h uint64
	i := 0
	if n >= 8 {
		v1 := parent + prime1 + prime2
		v2 := parent + prime2
		v3 := parent
		v4 := parent - prime1
		for ; i+8 <= n; i += 8 {
			t := toks[i : i+8 : i+8]
			v1 = round(v1, uint64(t[0])|uint64(t[1])<<32)
			v2 = round(v2, uint64(t[2])|uint64(t[3])<<32)
			v3 = round(v3, uint64(t[4])|uint64(t[5])<<32)
			v4 = round(v4, uint64(t[6])|uint64(t[7])<<32)
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = mergeRound(h, v1)
		h = mergeRound(h, v2)
		h = mergeRound(h, v3)
		h = mergeRound(h, v4)
	} else {
		h = parent + prime5
	}
	h += uint64(n) * 4
	for ; i < n; i++ {
		h ^= uint64(toks[i]) * prime1
		h = bits.RotateLeft64(h, 23)*prime2 + prime3
	}
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

// ChainKeys appends the chained keys of the full blocks of ids (at most
// maxBlocks, 0 = no limit) to dst and returns it. A trailing partial block
// is not keyed: engines cache full blocks only.
func ChainKeys(dst []uint64, seed uint64, ids []uint32, blockSize, maxBlocks int) []uint64 {
	if blockSize <= 0 {
		return dst
	}
	n := len(ids) / blockSize
	if maxBlocks > 0 && n > maxBlocks {
		n = maxBlocks
	}
	if cap(dst)-len(dst) < n {
		nd := make([]uint64, len(dst), len(dst)+n)
		copy(nd, dst)
		dst = nd
	}
	prev := seed
	for b := 0; b < n; b++ {
		prev = chainBlock(prev, ids[b*blockSize:(b+1)*blockSize])
		dst = append(dst, prev)
	}
	return dst
}

// Seed is the root of a request's key chain: blocks of different models
// (a LoRA adapter is addressed by its model name) or cache salts never
// share keys.
func Seed(model, cacheSalt string) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(model)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(cacheSalt)
	return d.Sum64()
}

// TextTokenBytes is how many prompt bytes make one pseudo-token when the
// request has no token ids (the estimate backend's ~4 bytes per token).
const TextTokenBytes = 4

// RequestIDs returns the ids a request's blocks are keyed from, and how
// many prompt tokens the request has. In order: the token producer's ids
// (req.Tokens.IDs), the prompt's own token ids (/v1/completions with token
// arrays), else the prompt text's bytes packed TextTokenBytes to a
// pseudo-id, so that identical text prefixes still share keys (the
// fallback when no token producer ran).
func RequestIDs(req *profiles.Request) (ids []uint32, promptTokens int) {
	ids = req.Tokens.IDs
	if len(ids) == 0 {
		ids = req.PromptIDs
	}
	if len(ids) == 0 {
		ids = textIDs(req.PromptText())
	}
	promptTokens = PromptTokens(req, len(ids))
	return ids, promptTokens
}

// PromptTokens is the request's prefill load in tokens: the token
// producer's weighted count (text + images × cost) when it ran, else n.
func PromptTokens(req *profiles.Request, n int) int {
	if req.Tokens.Counted {
		if req.Tokens.Weighted > 0 {
			return int(req.Tokens.Weighted + 0.5)
		}
		return req.Tokens.Total()
	}
	return n
}

func textIDs(s string) []uint32 {
	n := (len(s) + TextTokenBytes - 1) / TextTokenBytes
	out := make([]uint32, n)
	for i := range out {
		var v uint32
		for j := 0; j < TextTokenBytes; j++ {
			if k := i*TextTokenBytes + j; k < len(s) {
				v |= uint32(s[k]) << (8 * j)
			}
		}
		out[i] = v
	}
	return out
}

// RequestKeys is a request's chained block keys for one (seed, block size,
// limit), computed once and shared through the request's state.
type RequestKeys struct {
	Seed         uint64
	BlockSize    int
	MaxBlocks    int
	Keys         []uint64
	PromptTokens int
}

// KeysFor returns the request's keys for a block size and block limit,
// computing and storing them on first use so that every plugin of the
// request reuses one hashing pass.
func KeysFor(req *profiles.Request, blockSize, maxBlocks int) *RequestKeys {
	return keysFor(req, blockSize, maxBlocks, keysStateKey(blockSize, maxBlocks))
}

func keysFor(req *profiles.Request, blockSize, maxBlocks int, key string) *RequestKeys {
	seed := Seed(req.Model, req.CacheSalt)
	if v, ok := req.Get(key).(*RequestKeys); ok && v.Seed == seed {
		return v
	}
	ids, pt := RequestIDs(req)
	rk := &RequestKeys{Seed: seed, BlockSize: blockSize, MaxBlocks: maxBlocks, PromptTokens: pt}
	rk.Keys = ChainKeys(nil, seed, ids, blockSize, maxBlocks)
	req.Put(key, rk)
	return rk
}

func keysStateKey(blockSize, maxBlocks int) string {
	// Small fixed set of combinations per config: build without fmt.
	return "prefill/keys/" + itoa(blockSize) + "/" + itoa(maxBlocks)
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	neg := v < 0
	if neg {
		v = -v
	}
	for v > 0 {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}
