package imagesize

import (
	"errors"
	"io"
)

// Limits bound what a header read may cost.
type Limits struct {
	// MaxHeaderBytes is how many decoded bytes may be read looking for the
	// size (JPEG puts EXIF and ICC segments before the frame header).
	MaxHeaderBytes int
	// MaxSide and MaxPixels reject absurd sizes.
	MaxSide   int
	MaxPixels int64
}

// DefaultLimits: 1 MiB of header, 65535 per side (JPEG's own limit is
// 65535; larger PNG or WebP images are not photographs a VLM is sent), and
// 2^28 pixels.
var DefaultLimits = Limits{MaxHeaderBytes: 1 << 20, MaxSide: 1<<16 - 1, MaxPixels: 1 << 28}

func (l Limits) withDefaults() Limits {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultLimits.MaxHeaderBytes
	}
	if l.MaxSide <= 0 {
		l.MaxSide = DefaultLimits.MaxSide
	}
	if l.MaxPixels <= 0 {
		l.MaxPixels = DefaultLimits.MaxPixels
	}
	return l
}

// hdr is a small bounded reader: parsers ask for exact byte counts and get
// a truncation or limit error instead of a short read.
type hdr struct {
	r      io.Reader
	buf    [64]byte
	read   int // bytes consumed so far
	limit  int
	format string
}

// next returns the next n (≤ 64) bytes.
func (h *hdr) next(n int) ([]byte, error) {
	if h.read+n > h.limit {
		return nil, errorf(KindTooLarge, h.format, "size not found within the first %d bytes", h.limit)
	}
	b := h.buf[:n]
	if _, err := io.ReadFull(h.r, b); err != nil {
		return nil, h.wrap(err)
	}
	h.read += n
	return b, nil
}

// skip discards n bytes.
func (h *hdr) skip(n int) error {
	if h.read+n > h.limit {
		return errorf(KindTooLarge, h.format, "size not found within the first %d bytes", h.limit)
	}
	for n > 0 {
		k := min(n, len(h.buf))
		if _, err := io.ReadFull(h.r, h.buf[:k]); err != nil {
			return h.wrap(err)
		}
		h.read += k
		n -= k
	}
	return nil
}

func (h *hdr) wrap(err error) error {
	var ie *Error
	if errors.As(err, &ie) {
		if ie.Format == "" && h.format != "" {
			return &Error{Kind: ie.Kind, Format: h.format, Msg: ie.Msg}
		}
		return ie
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errorf(KindTruncated, h.format, "truncated header (data ends after %d bytes)", h.read)
	}
	return errorf(KindCorrupt, h.format, "reading header: %v", err)
}

func be16(b []byte) int { return int(b[0])<<8 | int(b[1]) }
func le16(b []byte) int { return int(b[0]) | int(b[1])<<8 }
func le24(b []byte) int { return int(b[0]) | int(b[1])<<8 | int(b[2])<<16 }
func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
