package imagesize

import (
	"io"
)

// b64Reader decodes standard or URL-safe base64 from a string as it is read.
// It accepts both alphabets (clients send either), padding or none, and
// skips ASCII whitespace (MIME line breaks). Errors name the offending
// character's offset in the payload.
type b64Reader struct {
	s    string
	pos  int // next input character
	out  [3]byte
	n    int // valid bytes in out
	off  int // next byte of out to return
	done bool
	err  error
}

const b64Invalid = 0xFF

var b64Table = func() [256]byte {
	var t [256]byte
	for i := range t {
		t[i] = b64Invalid
	}
	const std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := 0; i < len(std); i++ {
		t[std[i]] = byte(i)
	}
	t['-'] = 62
	t['_'] = 63
	return t
}()

func newB64Reader(s string) *b64Reader { return &b64Reader{s: s} }

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// fill decodes the next group of up to four characters into out.
func (r *b64Reader) fill() {
	var q [4]byte
	k := 0
	for k < 4 && r.pos < len(r.s) {
		c := r.s[r.pos]
		if isSpace(c) {
			r.pos++
			continue
		}
		if c == '=' {
			if k < 2 {
				r.err = errorf(KindBadBase64, "", "invalid base64: misplaced padding at offset %d", r.pos)
				return
			}
			// Padding ends the data; only whitespace and '=' may follow.
			for p := r.pos; p < len(r.s); p++ {
				if c := r.s[p]; c != '=' && !isSpace(c) {
					r.err = errorf(KindBadBase64, "", "invalid base64: data after padding at offset %d", p)
					return
				}
			}
			r.pos = len(r.s)
			break
		}
		v := b64Table[c]
		if v == b64Invalid {
			r.err = errorf(KindBadBase64, "", "invalid base64: illegal character %q at offset %d", c, r.pos)
			return
		}
		q[k] = v
		k++
		r.pos++
	}
	switch k {
	case 0:
		r.done = true
		return
	case 1:
		r.err = errorf(KindBadBase64, "", "invalid base64: truncated group at offset %d", r.pos)
		return
	}
	r.out[0] = q[0]<<2 | q[1]>>4
	r.out[1] = q[1]<<4 | q[2]>>2
	r.out[2] = q[2]<<6 | q[3]
	r.n, r.off = k-1, 0
	if k < 4 {
		r.done = true // a short group is the last one
	}
}

// Read implements io.Reader.
func (r *b64Reader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if r.off == r.n {
			if r.err != nil {
				break
			}
			if r.done {
				break
			}
			r.fill()
			if r.off == r.n {
				continue
			}
		}
		c := copy(p[n:], r.out[r.off:r.n])
		r.off += c
		n += c
	}
	if n > 0 {
		return n, nil
	}
	if r.err != nil {
		return 0, r.err
	}
	return 0, io.EOF
}
