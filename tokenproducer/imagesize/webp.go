package imagesize

// WebP: "RIFF" size "WEBP", then the first chunk says the kind:
//   - "VP8 " (lossy): frame tag (3), start code 9d 01 2a, width and height
//     (2 bytes LE each, low 14 bits; the top 2 bits are a scale hint);
//   - "VP8L" (lossless): signature 0x2f, then 14 bits width-1, 14 bits height-1;
//   - "VP8X" (extended): flags (4), canvas width-1 and height-1 (3 bytes LE each).
func decodeWebP(h *hdr) (Info, error) {
	b, err := h.next(18)
	if err != nil {
		return Info{}, err
	}
	if string(b[:2]) != "FF" || string(b[6:10]) != "WEBP" {
		return Info{}, errorf(KindUnknownFormat, "", "RIFF file is not WebP")
	}
	chunk := string(b[10:14])
	size := le32(b[14:18])
	switch chunk {
	case "VP8 ":
		if size < 10 {
			return Info{}, errorf(KindCorrupt, "webp", "VP8 chunk size %d < 10", size)
		}
		f, err := h.next(10)
		if err != nil {
			return Info{}, err
		}
		if f[0]&1 != 0 {
			return Info{}, errorf(KindCorrupt, "webp", "VP8 first frame is not a key frame")
		}
		if f[3] != 0x9d || f[4] != 0x01 || f[5] != 0x2a {
			return Info{}, errorf(KindCorrupt, "webp", "bad VP8 start code % x", f[3:6])
		}
		return Info{Width: le16(f[6:8]) & 0x3fff, Height: le16(f[8:10]) & 0x3fff}, nil
	case "VP8L":
		if size < 5 {
			return Info{}, errorf(KindCorrupt, "webp", "VP8L chunk size %d < 5", size)
		}
		f, err := h.next(5)
		if err != nil {
			return Info{}, err
		}
		if f[0] != 0x2f {
			return Info{}, errorf(KindCorrupt, "webp", "bad VP8L signature %#02x", f[0])
		}
		v := le32(f[1:5])
		if v>>29 != 0 {
			return Info{}, errorf(KindCorrupt, "webp", "unsupported VP8L version %d", v>>29)
		}
		return Info{Width: int(v&0x3fff) + 1, Height: int(v>>14&0x3fff) + 1}, nil
	case "VP8X":
		if size < 10 {
			return Info{}, errorf(KindCorrupt, "webp", "VP8X chunk size %d < 10", size)
		}
		f, err := h.next(10)
		if err != nil {
			return Info{}, err
		}
		return Info{Width: le24(f[4:7]) + 1, Height: le24(f[7:10]) + 1}, nil
	}
	return Info{}, errorf(KindCorrupt, "webp", "unknown first chunk %q (want VP8, VP8L or VP8X)", chunk)
}
