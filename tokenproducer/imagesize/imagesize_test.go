package imagesize

import (
	"bytes"
	"encoding/base64"
	"errors"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"
)

func testImage(w, h int) image.Image {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			m.Set(x, y, color.RGBA{uint8(x), uint8(y), uint8(x ^ y), 255})
		}
	}
	return m
}

func encodePNG(t testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, testImage(w, h)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(t testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := jpeg.Encode(&b, testImage(w, h), &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeGIF(t testing.TB, w, h int) []byte {
	var b bytes.Buffer
	if err := gif.Encode(&b, testImage(w, h), nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Hand-made WebP headers (the standard library has no WebP encoder).
func webpVP8(w, h int) []byte {
	frame := []byte{0x10, 0x02, 0x00, 0x9d, 0x01, 0x2a, byte(w), byte(w >> 8), byte(h), byte(h >> 8)}
	return riff("VP8 ", frame)
}

func webpVP8L(w, h int) []byte {
	v := uint32(w-1) | uint32(h-1)<<14
	return riff("VP8L", []byte{0x2f, byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
}

func webpVP8X(w, h int) []byte {
	w--
	h--
	return riff("VP8X", []byte{0x10, 0, 0, 0, byte(w), byte(w >> 8), byte(w >> 16), byte(h), byte(h >> 8), byte(h >> 16)})
}

func riff(chunk string, payload []byte) []byte {
	var b bytes.Buffer
	n := 4 + 8 + len(payload)
	b.WriteString("RIFF")
	b.Write([]byte{byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)})
	b.WriteString("WEBP")
	b.WriteString(chunk)
	p := len(payload)
	b.Write([]byte{byte(p), byte(p >> 8), byte(p >> 16), byte(p >> 24)})
	b.Write(payload)
	return b.Bytes()
}

// jpegWithAPP returns a JPEG whose frame header follows a large APP1
// segment, as EXIF-bearing photos have.
func jpegWithAPP(t testing.TB, w, h, appBytes int) []byte {
	j := encodeJPEG(t, w, h)
	seg := []byte{0xFF, 0xE1, byte((appBytes + 2) >> 8), byte(appBytes + 2)}
	seg = append(seg, bytes.Repeat([]byte{'x'}, appBytes)...)
	return append(append(append([]byte{}, j[:2]...), seg...), j[2:]...)
}

// progressiveJPEG rewrites the baseline SOF0 marker to SOF2: the header
// layout is the same, which is all Decode reads.
func progressiveJPEG(t testing.TB, w, h int) []byte {
	j := encodeJPEG(t, w, h)
	i := bytes.Index(j, []byte{0xFF, 0xC0})
	if i < 0 {
		t.Fatal("no SOF0")
	}
	j[i+1] = 0xC2
	return j
}

func dataURL(mime string, b []byte) string {
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
}

func TestDecodeFormats(t *testing.T) {
	cases := []struct {
		name   string
		data   []byte
		format string
		w, h   int
	}{
		{"png", encodePNG(t, 37, 21), "png", 37, 21},
		{"png-1x1", encodePNG(t, 1, 1), "png", 1, 1},
		{"jpeg", encodeJPEG(t, 640, 480), "jpeg", 640, 480},
		{"jpeg-odd", encodeJPEG(t, 33, 17), "jpeg", 33, 17},
		{"jpeg-progressive", progressiveJPEG(t, 300, 200), "jpeg", 300, 200},
		{"jpeg-exif-60k", jpegWithAPP(t, 64, 48, 60000), "jpeg", 64, 48},
		{"gif", encodeGIF(t, 200, 300), "gif", 200, 300},
		{"webp-vp8", webpVP8(1280, 720), "webp", 1280, 720},
		{"webp-vp8-scalebits", webpVP8(1280|0xC000, 720|0x4000), "webp", 1280, 720},
		{"webp-vp8l", webpVP8L(16383, 2), "webp", 16383, 2},
		{"webp-vp8x", webpVP8X(40000, 3), "webp", 40000, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info, err := Decode(bytes.NewReader(c.data), Limits{})
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if info != (Info{Format: c.format, Width: c.w, Height: c.h}) {
				t.Fatalf("got %+v, want %s %dx%d", info, c.format, c.w, c.h)
			}
			// The same through a data URL, std and URL-safe alphabets,
			// with and without padding and with MIME line breaks.
			enc := base64.StdEncoding.EncodeToString(c.data)
			urls := []string{
				"data:image/" + c.format + ";base64," + enc,
				"data:image/x;charset=binary;base64," + base64.URLEncoding.EncodeToString(c.data),
				"DATA:;base64," + base64.RawStdEncoding.EncodeToString(c.data),
				"data:image/x;base64," + wrap76(enc),
			}
			for _, u := range urls {
				got, err := FromDataURL(u, Limits{})
				if err != nil || got != info {
					t.Fatalf("FromDataURL(%.40q…) = %+v, %v; want %+v", u, got, err, info)
				}
			}
		})
	}
}

func wrap76(s string) string {
	var b strings.Builder
	for len(s) > 76 {
		b.WriteString(s[:76])
		b.WriteString("\r\n")
		s = s[76:]
	}
	b.WriteString(s)
	return b.String()
}

// countingReader counts how much of the payload Decode pulled.
type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestDecodeReadsOnlyHeader(t *testing.T) {
	big := encodePNG(t, 1000, 1000)
	cr := &countingReader{r: bytes.NewReader(big)}
	if _, err := Decode(cr, Limits{}); err != nil {
		t.Fatal(err)
	}
	if cr.n > 64 {
		t.Fatalf("read %d of %d bytes for a PNG header, want ≤ 64", cr.n, len(big))
	}
	// A corrupt byte far past the header must not matter: nothing after
	// the header is decoded.
	u := dataURL("image/png", big)
	u = u[:len(u)-100] + "!!!!" + u[len(u)-96:]
	if _, err := FromDataURL(u, Limits{}); err != nil {
		t.Fatalf("data after the header was decoded: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	png := encodePNG(t, 10, 10)
	jpg := encodeJPEG(t, 10, 10)
	corruptIHDR := append([]byte{}, png...)
	copy(corruptIHDR[12:16], "IDAT")
	zeroPNG := append([]byte{}, png...)
	copy(zeroPNG[16:20], []byte{0, 0, 0, 0})
	hugePNG := append([]byte{}, png...)
	copy(hugePNG[16:24], []byte{0, 1, 0, 0, 0, 1, 0, 0})
	sosFirst := []byte{0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02}
	badVP8 := webpVP8(10, 10)
	badVP8[23] = 0x00 // start code
	cases := []struct {
		name string
		data []byte
		kind ErrorKind
		msg  string
	}{
		{"empty", nil, KindUnknownFormat, "empty"},
		{"text", []byte("hello world"), KindUnknownFormat, "unknown image format"},
		{"png-truncated", png[:20], KindTruncated, "png: truncated header"},
		{"png-bad-signature", append([]byte{0x89, 'P', 'X'}, png[3:]...), KindUnknownFormat, "bad PNG signature"},
		{"png-first-chunk", corruptIHDR, KindCorrupt, "want IHDR"},
		{"png-zero", zeroPNG, KindCorrupt, "zero image size 0x10"},
		{"png-huge", hugePNG, KindTooLarge, "65536x65536 is over the limit"},
		{"jpeg-truncated", jpg[:30], KindTruncated, "jpeg: truncated"},
		{"jpeg-soi-only", jpg[:2], KindTruncated, "jpeg: truncated"},
		{"jpeg-sos-first", sosFirst, KindCorrupt, "scan data before any frame header"},
		{"jpeg-eoi", []byte{0xFF, 0xD8, 0xFF, 0xD9}, KindCorrupt, "end of image"},
		{"jpeg-garbage", []byte{0xFF, 0xD8, 0x12, 0x34}, KindCorrupt, "expected a marker at byte 2"},
		{"jpeg-short-seg", []byte{0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01}, KindCorrupt, "length 1 < 2"},
		{"gif-truncated", []byte("GIF89a\x01"), KindTruncated, "gif: truncated"},
		{"gif-bad", []byte("GIF90a\x01\x00\x01\x00"), KindUnknownFormat, "bad GIF signature"},
		{"riff-wave", riff("fmt ", make([]byte, 16))[:8], KindTruncated, "webp: truncated"},
		{"webp-unknown-chunk", riff("ALPH", make([]byte, 16)), KindCorrupt, "unknown first chunk"},
		{"webp-bad-vp8", badVP8, KindCorrupt, "bad VP8 start code"},
		{"webp-vp8-truncated", webpVP8(10, 10)[:25], KindTruncated, "webp: truncated"},
		{"webp-vp8l-sig", func() []byte { b := webpVP8L(5, 5); b[20] = 0; return b }(), KindCorrupt, "bad VP8L signature"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(bytes.NewReader(c.data), Limits{})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want *Error", err)
			}
			if e.Kind != c.kind || !strings.Contains(e.Error(), c.msg) {
				t.Fatalf("got %s %q, want %s containing %q", e.Kind, e.Error(), c.kind, c.msg)
			}
		})
	}
}

func TestHeaderLimit(t *testing.T) {
	j := jpegWithAPP(t, 64, 48, 60000)
	_, err := Decode(bytes.NewReader(j), Limits{MaxHeaderBytes: 4096})
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindTooLarge || !strings.Contains(e.Error(), "within the first 4096 bytes") {
		t.Fatalf("got %v, want too_large within 4096 bytes", err)
	}
	_, err = Decode(bytes.NewReader(encodePNG(t, 300, 300)), Limits{MaxSide: 200})
	if !errors.As(err, &e) || e.Kind != KindTooLarge {
		t.Fatalf("MaxSide: got %v", err)
	}
}

func TestDataURLErrors(t *testing.T) {
	png := encodePNG(t, 8, 8)
	enc := base64.StdEncoding.EncodeToString(png)
	cases := []struct {
		url  string
		kind ErrorKind
		msg  string
	}{
		{"http://x/y.png", KindBadURL, "not a data: URL"},
		{"data:image/png;base64", KindBadURL, "no ','"},
		{"data:image/png;base64,iVBO*w0KGgo", KindBadBase64, "illegal character '*' at offset 4"},
		{"data:image/png;base64,i", KindBadBase64, "truncated group"},
		{"data:image/png;base64,iV==AAAA", KindBadBase64, "data after padding at offset 4"},
		{"data:image/png;base64,=AAA", KindBadBase64, "misplaced padding at offset 0"},
		{"data:image/png;base64," + enc[:12], KindTruncated, "png: truncated"},
		{"data:image/png;base64,", KindUnknownFormat, "empty"},
		{"data:image/png," + "%zz", KindBadURL, "percent-encoding"},
	}
	for _, c := range cases {
		_, err := FromDataURL(c.url, Limits{})
		var e *Error
		if !errors.As(err, &e) || e.Kind != c.kind || !strings.Contains(e.Error(), c.msg) {
			t.Errorf("FromDataURL(%q) = %v, want %s containing %q", c.url, err, c.kind, c.msg)
		}
	}
	// Percent-encoded (non-base64) payloads are read too.
	var b strings.Builder
	for _, c := range webpVP8L(3, 4) {
		b.WriteString("%")
		b.WriteString(strings.ToUpper(string("0123456789abcdef"[c>>4]) + string("0123456789abcdef"[c&15])))
	}
	info, err := FromDataURL("data:image/webp,"+b.String(), Limits{})
	if err != nil || info.Width != 3 || info.Height != 4 {
		t.Fatalf("percent-encoded: %+v, %v", info, err)
	}
}

// Real encoder output: the 1×1 lossless, lossy and lossy+alpha (VP8X)
// WebP images browsers' feature tests use.
func TestRealWebP(t *testing.T) {
	for name, s := range map[string]string{
		"lossless": "UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA==",
		"lossy":    "UklGRiIAAABXRUJQVlA4IBYAAAAwAQCdASoBAAEADsD+JaQAA3AAAAAA",
		"alpha":    "UklGRkoAAABXRUJQVlA4WAoAAAAQAAAAAAAAAAAAQUxQSAwAAAARBxAR/Q9ERP8DAABWUDggGAAAABQBAJ0BKgEAAQAAAP4AAA3AAP7mtQAAAA==",
	} {
		info, err := FromDataURL("data:image/webp;base64,"+s, Limits{})
		if err != nil || info != (Info{Format: "webp", Width: 1, Height: 1}) {
			t.Errorf("%s: %+v %v", name, info, err)
		}
	}
}
