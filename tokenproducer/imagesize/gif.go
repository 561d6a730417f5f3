package imagesize

// GIF: "GIF87a" or "GIF89a", then the logical screen width and height
// (2 bytes each, little-endian).
func decodeGIF(h *hdr) (Info, error) {
	b, err := h.next(8)
	if err != nil {
		return Info{}, err
	}
	if string(b[:4]) != "F87a" && string(b[:4]) != "F89a" {
		return Info{}, errorf(KindUnknownFormat, "", "bad GIF signature %q", "GI"+string(b[:4]))
	}
	return Info{Width: le16(b[4:6]), Height: le16(b[6:8])}, nil
}
