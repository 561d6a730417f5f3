package prefill

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
	"github.com/spillway-llm/spillway/profiles"
)

// Block keys are chained: key(i) = H(key(i−1), tokens of block i), key(−1)
// = the request's seed (model, cache salt). A block's key therefore names
// the whole prefix up to and including it, and "the first k blocks match"
// is "key(k−1) is indexed". H is a wyhash-style multiply-fold applied
// directly to the uint32 token ids (two ids per 64-bit lane, two
// independent accumulators, then one multiply with the parent key): no byte
// conversion, no allocation, a few ns per 16-token block. It is not
// cryptographic; a collision only costs a mis-estimated cache hit.

const (
	wyp0 uint64 = 0xa0761d6478bd642f
	wyp1 uint64 = 0xe7037ed1a0b428db
	wyp2 uint64 = 0x8ebc6af09c88c6e3
	wyp3 uint64 = 0x589965cc75374cc3
	wyp4 uint64 = 0x1d8e4e27c47d124f
)

// mix folds the 128-bit product of a and b.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// chainBlock returns the key of a block whose parent key is parent. The
// tokens are folded without the parent and the parent joins in one final
// multiply: consecutive blocks' token folds do not depend on each other,
// so the CPU overlaps them and the serial chain costs one multiply per
// block.
func chainBlock(parent uint64, toks []uint32) uint64 {
	a, b := foldTokens(toks)
	return mix(parent^a^wyp3, b^wyp4)
}

// foldTokens folds a block's tokens into two well-mixed words.
func foldTokens(toks []uint32) (uint64, uint64) {
	n := len(toks)
	a, b := wyp0, wyp1
	i := 0
	for ; i+8 <= n; i += 8 {
		t := toks[i : i+8 : i+8]
		a = mix(uint64(t[0])|uint64(t[1])<<32^wyp1, uint64(t[2])|uint64(t[3])<<32^a)
		b = mix(uint64(t[4])|uint64(t[5])<<32^wyp2, uint64(t[6])|uint64(t[7])<<32^b)
	}
	for ; i+2 <= n; i += 2 {
		a = mix(uint64(toks[i])|uint64(toks[i+1])<<32^wyp3, a^wyp1)
	}
	if i < n {
		b = mix(uint64(toks[i])^wyp3, b^wyp2)
	}
	return a, b ^ uint64(n)
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
	if blockSize == 16 {
		// The default block size, unrolled: same result as chainBlock.
		for b := 0; b < n; b++ {
			t := ids[b*16 : b*16+16 : b*16+16]
			a := mix(uint64(t[0])|uint64(t[1])<<32^wyp1, uint64(t[2])|uint64(t[3])<<32^wyp0)
			c := mix(uint64(t[4])|uint64(t[5])<<32^wyp2, uint64(t[6])|uint64(t[7])<<32^wyp1)
			a = mix(uint64(t[8])|uint64(t[9])<<32^wyp1, uint64(t[10])|uint64(t[11])<<32^a)
			c = mix(uint64(t[12])|uint64(t[13])<<32^wyp2, uint64(t[14])|uint64(t[15])<<32^c)
			prev = mix(prev^a^wyp3, c^16^wyp4)
			dst = append(dst, prev)
		}
		return dst
	}
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
