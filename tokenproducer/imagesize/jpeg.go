package imagesize

// JPEG: after SOI, walk the marker segments until a start-of-frame marker
// (baseline, extended, progressive, lossless; Huffman or arithmetic). Its
// payload is precision (1), height (2, BE), width (2, BE). APPn segments
// (EXIF, ICC) are skipped by their length, within the header limit.
//
// EXIF orientation is not applied: the Qwen smart_resize is symmetric in
// width and height, so a rotated image has the same token count.
func decodeJPEG(h *hdr) (Info, error) {
	for segs := 0; ; segs++ {
		if segs > 4096 {
			return Info{}, errorf(KindCorrupt, "jpeg", "no frame header in the first %d segments", segs)
		}
		b, err := h.next(1)
		if err != nil {
			return Info{}, err
		}
		if b[0] != 0xFF {
			return Info{}, errorf(KindCorrupt, "jpeg", "expected a marker at byte %d, got %#02x", h.read-1, b[0])
		}
		// Any number of 0xFF fill bytes may precede the marker code.
		var m byte
		for fill := 0; ; fill++ {
			if fill > 64 {
				return Info{}, errorf(KindCorrupt, "jpeg", "too many fill bytes at byte %d", h.read)
			}
			b, err = h.next(1)
			if err != nil {
				return Info{}, err
			}
			if b[0] != 0xFF {
				m = b[0]
				break
			}
		}
		switch {
		case m == 0x00:
			return Info{}, errorf(KindCorrupt, "jpeg", "stuffed byte outside entropy-coded data at byte %d", h.read-2)
		case m == 0x01 || (m >= 0xD0 && m <= 0xD7):
			continue // standalone markers: TEM, RSTn
		case m == 0xD8:
			return Info{}, errorf(KindCorrupt, "jpeg", "second SOI marker at byte %d", h.read-2)
		case m == 0xD9:
			return Info{}, errorf(KindCorrupt, "jpeg", "end of image before any frame header")
		case m == 0xDA:
			return Info{}, errorf(KindCorrupt, "jpeg", "scan data before any frame header")
		}
		lb, err := h.next(2)
		if err != nil {
			return Info{}, err
		}
		n := be16(lb)
		if n < 2 {
			return Info{}, errorf(KindCorrupt, "jpeg", "segment %#02x length %d < 2", m, n)
		}
		if isSOF(m) {
			if n < 8 {
				return Info{}, errorf(KindCorrupt, "jpeg", "frame header length %d < 8", n)
			}
			f, err := h.next(5)
			if err != nil {
				return Info{}, err
			}
			height, width := be16(f[1:3]), be16(f[3:5])
			if height == 0 {
				return Info{}, errorf(KindCorrupt, "jpeg", "frame height 0 (size defined by a DNL marker is not supported)")
			}
			return Info{Width: width, Height: height}, nil
		}
		if err := h.skip(n - 2); err != nil {
			return Info{}, err
		}
	}
}

// isSOF: C0–C3, C5–C7, C9–CB, CD–CF (C4 DHT, C8 JPG, CC DAC are not frames).
func isSOF(m byte) bool {
	return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC
}
