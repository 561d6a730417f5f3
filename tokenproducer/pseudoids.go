package tokenproducer

import (
	"slices"
	"unsafe"

	"github.com/spillway-llm/spillway/profiles"
)

// Pseudo-ids stand in for token ids when the backend has none. The prompt
// text (each message's role, "\n", text, "\n" — profiles.Request.PromptText)
// is packed 4 bytes to a little-endian id, exactly like the prefix index's
// own fallback, so blocks keep the same keys with or without this producer.
// Each multimodal item follows its message's text as a run of `tokens` ids
// derived from its content hash: two prompts that differ only in an image
// share their blocks up to the image and no further.

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

type idPacker struct {
	out  []uint32
	cur  uint32
	nCur int
}

func (p *idPacker) write(s string) {
	i := 0
	for p.nCur != 0 && i < len(s) {
		p.byte(s[i])
		i++
	}
	if k := (len(s) - i) / 4; k > 0 {
		n := len(p.out)
		p.out = slices.Grow(p.out, k)[:n+k]
		dst := p.out[n : n+k]
		src := s[i : i+4*k]
		if littleEndian {
			// The ids are the bytes read as little-endian words: on a
			// little-endian machine that is a plain copy.
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*k), src)
		} else {
			for j := range dst {
				c := src[4*j : 4*j+4]
				dst[j] = uint32(c[0]) | uint32(c[1])<<8 | uint32(c[2])<<16 | uint32(c[3])<<24
			}
		}
		i += 4 * k
	}
	for ; i < len(s); i++ {
		p.byte(s[i])
	}
}

func (p *idPacker) byte(c byte) {
	p.cur |= uint32(c) << (8 * p.nCur)
	p.nCur++
	if p.nCur == 4 {
		p.out = append(p.out, p.cur)
		p.cur, p.nCur = 0, 0
	}
}

func (p *idPacker) flush() {
	if p.nCur > 0 {
		p.out = append(p.out, p.cur)
		p.cur, p.nCur = 0, 0
	}
}

func (p *idPacker) item(hash uint64, tokens int) {
	p.flush()
	id := uint32(hash) ^ uint32(hash>>32)
	for range tokens {
		p.out = append(p.out, id)
	}
}

// pseudoIDs builds the stand-in ids of a request whose items were counted
// into imgs (aligned with req.Multimodal).
func pseudoIDs(req *profiles.Request, imgs []profiles.ImageTokens) []uint32 {
	size := len(req.Prompt)/4 + 2 + len(req.PromptIDs)
	for i := range req.Messages {
		size += (len(req.Messages[i].Role)+len(req.Messages[i].Text))/4 + 2
	}
	for i := range imgs {
		size += imgs[i].Tokens
	}
	p := idPacker{out: make([]uint32, 0, size)}
	if len(req.Messages) == 0 {
		p.write(req.Prompt)
		p.flush()
		// A completions prompt given as token ids keeps its real ids.
		p.out = append(p.out, req.PromptIDs...)
		for i := range imgs {
			p.item(imgs[i].Hash, imgs[i].Tokens)
		}
		return p.out
	}
	next := 0 // next multimodal item
	for mi := range req.Messages {
		p.write(req.Messages[mi].Role)
		p.write("\n")
		p.write(req.Messages[mi].Text)
		p.write("\n")
		for next < len(imgs) && next < len(req.Multimodal) && req.Multimodal[next].Message <= mi {
			p.item(imgs[next].Hash, imgs[next].Tokens)
			next++
		}
	}
	p.flush()
	for ; next < len(imgs); next++ {
		p.item(imgs[next].Hash, imgs[next].Tokens)
	}
	return p.out
}

// withItems appends the items' hash-derived ids to real text token ids:
// the tokenizer saw text only, and the items follow it.
func withItems(ids []uint32, imgs []profiles.ImageTokens) []uint32 {
	n := 0
	for i := range imgs {
		n += imgs[i].Tokens
	}
	if n == 0 {
		return ids
	}
	p := idPacker{out: make([]uint32, len(ids), len(ids)+n)}
	copy(p.out, ids)
	for i := range imgs {
		p.item(imgs[i].Hash, imgs[i].Tokens)
	}
	return p.out
}
