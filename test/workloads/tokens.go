package workloads

import (
	"strconv"
	"strings"
)

// VocabSize bounds the pseudo token ids: the same order as real tokenizers,
// so ids look like ids to anything that inspects them.
const VocabSize = 151000

// AppendIDs appends the segment's token ids to dst.
func (s Segment) AppendIDs(dst []uint32) []uint32 {
	for i := range s.Len {
		dst = append(dst, uint32(mix(s.Key+uint64(i))%VocabSize))
	}
	return dst
}

// IDs returns the prompt's token ids.
func (t *Turn) IDs() []uint32 {
	out := make([]uint32, 0, t.PromptTokens())
	for _, s := range t.Segments {
		out = s.AppendIDs(out)
	}
	return out
}

// Text renders the prompt as text with exactly one whitespace-separated
// word per token, for real-HTTP runs against servers that count words
// (the simulator) and for humans reading a trace. Words are drawn from a
// small alphabet of ids so that shared segments render identically.
func (t *Turn) Text() string {
	var b strings.Builder
	b.Grow(t.PromptTokens() * 7)
	for _, s := range t.Segments {
		for i := range s.Len {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteByte('w')
			b.WriteString(strconv.FormatUint(mix(s.Key+uint64(i))%VocabSize, 36))
		}
	}
	return b.String()
}
