package imagesize

import (
	"io"
	"net/url"
	"strings"
)

// Info is what a header says.
type Info struct {
	Format string // png, jpeg, gif, webp
	Width  int
	Height int
}

// Decode reads an image's size from the start of r. It reads only the
// header, at most lim.MaxHeaderBytes bytes.
func Decode(r io.Reader, lim Limits) (Info, error) {
	lim = lim.withDefaults()
	h := &hdr{r: r, limit: lim.MaxHeaderBytes}
	magic, err := h.next(2)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Kind == KindTruncated {
			return Info{}, errorf(KindUnknownFormat, "", "empty or truncated image data (%d bytes)", h.read)
		}
		return Info{}, err
	}
	var info Info
	switch {
	case magic[0] == 0x89 && magic[1] == 'P':
		h.format = "png"
		info, err = decodePNG(h)
	case magic[0] == 0xFF && magic[1] == 0xD8:
		h.format = "jpeg"
		info, err = decodeJPEG(h)
	case magic[0] == 'G' && magic[1] == 'I':
		h.format = "gif"
		info, err = decodeGIF(h)
	case magic[0] == 'R' && magic[1] == 'I':
		h.format = "webp"
		info, err = decodeWebP(h)
	default:
		return Info{}, errorf(KindUnknownFormat, "", "unknown image format (first bytes %#02x %#02x; want PNG, JPEG, GIF or WebP)", magic[0], magic[1])
	}
	if err != nil {
		return Info{}, err
	}
	info.Format = h.format
	if info.Width <= 0 || info.Height <= 0 {
		return Info{}, errorf(KindCorrupt, info.Format, "zero image size %dx%d", info.Width, info.Height)
	}
	if info.Width > lim.MaxSide || info.Height > lim.MaxSide || int64(info.Width)*int64(info.Height) > lim.MaxPixels {
		return Info{}, errorf(KindTooLarge, info.Format, "image size %dx%d is over the limit (%d per side, %d pixels)", info.Width, info.Height, lim.MaxSide, lim.MaxPixels)
	}
	return info, nil
}

// DataURL is a parsed data: URL. Payload is not decoded.
type DataURL struct {
	MediaType string // e.g. image/png; "" when absent
	Base64    bool
	Payload   string
}

// ParseDataURL splits data:[<media type>][;params][;base64],<data>.
func ParseDataURL(u string) (DataURL, error) {
	if len(u) < 5 || !strings.EqualFold(u[:5], "data:") {
		return DataURL{}, errorf(KindBadURL, "", "not a data: URL")
	}
	comma := strings.IndexByte(u, ',')
	if comma < 0 {
		return DataURL{}, errorf(KindBadURL, "", "data URL has no ',' before its data")
	}
	meta := u[5:comma]
	d := DataURL{Payload: u[comma+1:]}
	if i := strings.IndexByte(meta, ';'); i >= 0 {
		d.MediaType = strings.ToLower(strings.TrimSpace(meta[:i]))
		for _, p := range strings.Split(meta[i+1:], ";") {
			if strings.EqualFold(strings.TrimSpace(p), "base64") {
				d.Base64 = true
			}
		}
	} else {
		d.MediaType = strings.ToLower(strings.TrimSpace(meta))
	}
	return d, nil
}

// Reader returns a reader of the URL's decoded bytes. Base64 is decoded
// incrementally; percent-encoded payloads (rare for images) are unescaped
// up to maxBytes.
func (d DataURL) Reader(maxBytes int) (io.Reader, error) {
	if d.Base64 {
		return newB64Reader(d.Payload), nil
	}
	p := d.Payload
	if maxBytes > 0 && len(p) > 3*maxBytes {
		p = p[:3*maxBytes]
		// Do not cut a %XX escape in half.
		if i := strings.LastIndexByte(p[max(0, len(p)-2):], '%'); i >= 0 {
			p = p[:len(p)-2+i]
		}
	}
	s, err := url.PathUnescape(p)
	if err != nil {
		return nil, errorf(KindBadURL, "", "data URL: bad percent-encoding: %v", err)
	}
	return strings.NewReader(s), nil
}

// FromDataURL reads the size of the image in a data: URL.
func FromDataURL(u string, lim Limits) (Info, error) {
	d, err := ParseDataURL(u)
	if err != nil {
		return Info{}, err
	}
	lim = lim.withDefaults()
	r, err := d.Reader(lim.MaxHeaderBytes)
	if err != nil {
		return Info{}, err
	}
	return Decode(r, lim)
}
