package sim

import (
	"strings"
)

// VocabSize bounds the token ids the deterministic tokenizer produces.
const VocabSize = 151936

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// WordToken is the token id of one whitespace-separated word:
// FNV-1a-64(word) mod VocabSize.
func WordToken(word string) uint32 { return uint32(fnv64(word) % VocabSize) }

// TokenizeText is the simulator's deterministic tokenizer: one token per
// whitespace-separated word (strings.Fields), id = WordToken(word).
func TokenizeText(s string) []uint32 {
	return AppendText(nil, s)
}

// AppendText appends the tokens of s to dst.
func AppendText(dst []uint32, s string) []uint32 {
	for _, w := range strings.Fields(s) {
		dst = append(dst, WordToken(w))
	}
	return dst
}

// AppendImage appends the n tokens of one image: id_i = mix64(FNV(url)+i) mod
// VocabSize, so the same image yields the same (cacheable) tokens.
func AppendImage(dst []uint32, url string, n int) []uint32 {
	h := fnv64(url)
	for i := 0; i < n; i++ {
		dst = append(dst, uint32(mix64(h+uint64(i))%VocabSize))
	}
	return dst
}

// MMHash is the multimodal hash the simulator keys ec_transfer_params by.
func MMHash(url string) string {
	const hexd = "0123456789abcdef"
	h := mix64(fnv64(url))
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = hexd[h&15]
		h >>= 4
	}
	return string(b)
}

// RoleToken is the token a chat message's role contributes ("<|role|>").
func RoleToken(role string) uint32 { return WordToken("<|" + role + "|>") }

// BlockHashSeed is the parent hash of a sequence's first block.
const BlockHashSeed uint64 = 0x9e3779b97f4a7c15

// HashBlock chains one full block: h = mix64(parent ⊕ ...) folded over the
// block's token ids. Deterministic and stable across runs and processes.
func HashBlock(parent uint64, tokens []uint32) uint64 {
	h := parent
	for _, t := range tokens {
		h = mix64(h ^ (uint64(t) + 0x100000001b3))
	}
	return h
}

// BlockHashes returns the chained hashes of every full block of tokens.
func BlockHashes(tokens []uint32, blockSize int) []uint64 {
	return AppendBlockHashes(nil, tokens, blockSize)
}

// AppendBlockHashes extends hashes (the chained hashes of a prefix of tokens)
// to cover every full block of tokens, computing only the missing ones. This
// lets a workload hash a growing conversation once.
func AppendBlockHashes(hashes []uint64, tokens []uint32, blockSize int) []uint64 {
	parent := BlockHashSeed
	if len(hashes) > 0 {
		parent = hashes[len(hashes)-1]
	}
	for i := len(hashes) * blockSize; i+blockSize <= len(tokens); i += blockSize {
		parent = HashBlock(parent, tokens[i:i+blockSize])
		hashes = append(hashes, parent)
	}
	return hashes
}
