package imagesize

// PNG: 8-byte signature, then the IHDR chunk must come first:
// length (4, = 13), "IHDR", width (4, BE), height (4, BE).
func decodePNG(h *hdr) (Info, error) {
	b, err := h.next(22)
	if err != nil {
		return Info{}, err
	}
	if string(b[:6]) != "NG\r\n\x1a\n" {
		return Info{}, errorf(KindUnknownFormat, "", "bad PNG signature")
	}
	if string(b[10:14]) != "IHDR" {
		return Info{}, errorf(KindCorrupt, "png", "first chunk is %q, want IHDR", b[10:14])
	}
	if n := be32(b[6:10]); n != 13 {
		return Info{}, errorf(KindCorrupt, "png", "IHDR length %d, want 13", n)
	}
	w, hgt := be32(b[14:18]), be32(b[18:22])
	if w > 1<<31-1 || hgt > 1<<31-1 {
		return Info{}, errorf(KindCorrupt, "png", "IHDR size %dx%d exceeds 2^31-1", w, hgt)
	}
	return Info{Width: int(w), Height: int(hgt)}, nil
}
