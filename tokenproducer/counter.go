package tokenproducer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/tokenproducer/imagesize"
)

// Counter counts requests' prompt tokens. It is safe for concurrent use.
type Counter struct {
	p     Params
	text  TextCounter
	est   estimateCounter
	lim   imagesize.Limits
	fetch *fetcher
	cal   *Calibration
	m     *metrics

	confs  sync.Map // model → modelConf
	nConfs atomic.Int32
}

// Raw is a request's count before calibration, kept for learning from the
// response.
type Raw struct {
	Model string
	Text  int // including image wrapper tokens
	Image int
}

// New builds a Counter. reg may be nil (metrics are then not exported).
func New(p Params, reg prometheus.Registerer) (*Counter, error) {
	p.defaults()
	if err := p.validate(); err != nil {
		return nil, err
	}
	c := &Counter{p: p, cal: NewCalibration(), m: newMetrics(reg), lim: imagesize.Limits{MaxHeaderBytes: p.MaxImageHeaderBytes}}
	switch p.Backend {
	case BackendEstimate:
		c.text = estimateCounter{}
	case BackendTiktoken:
		t, err := newTiktoken(p.TiktokenEncoding, "")
		if err != nil {
			return nil, err
		}
		c.text = t
	case BackendModelServer:
		c.text = newModelServer(p.ModelServer)
	}
	if p.RemoteFetch.Enabled {
		c.fetch = newFetcher(p.RemoteFetch, c.lim)
	}
	return c, nil
}

// Params returns the resolved parameters (defaults filled).
func (c *Counter) Params() Params { return c.p }

// Calibration returns the learned ratios.
func (c *Counter) Calibration() *Calibration { return c.cal }

// maxConfs bounds the per-model cache (names come from clients).
const maxConfs = 1024

func (c *Counter) conf(model string) modelConf {
	if v, ok := c.confs.Load(model); ok {
		return v.(modelConf)
	}
	mc, err := c.p.resolve(model)
	if err != nil {
		// validate() resolved the configured models; an unconfigured name
		// can only pick a family by pattern, which cannot fail.
		mc, _ = c.p.resolve("")
	}
	if c.nConfs.Add(1) <= maxConfs {
		c.confs.Store(model, mc)
	}
	return mc
}

// ImageModel returns the image formula used for a model.
func (c *Counter) ImageModel(model string) ImageModel { return c.conf(model).img }

// Count fills the token counts of req. eps are the candidate endpoints
// (the model-server backend asks one of them when no URL is configured).
// A multimodal item whose size cannot be read is a *profiles.StatusError
// with code 400 unless onImageError is default.
func (c *Counter) Count(ctx context.Context, req *profiles.Request, eps []*profiles.Endpoint) (profiles.TokenCounts, Raw, error) {
	mc := c.conf(req.Model)
	tr, err := c.text.CountText(ctx, req, eps)
	if err != nil {
		if ctx.Err() != nil {
			return profiles.TokenCounts{}, Raw{}, fmt.Errorf("counting text tokens: %w", ctx.Err())
		}
		reason := "error"
		var fe *FallbackError
		if errors.As(err, &fe) {
			reason = fe.Reason
		}
		c.m.fallbacks.WithLabelValues(c.p.Backend, reason).Inc()
		tr, _ = c.est.CountText(ctx, req, eps)
	}
	var imgs []profiles.ImageTokens
	image, wrappers := 0, 0
	if n := len(req.Multimodal); n > 0 {
		imgs = make([]profiles.ImageTokens, n)
		nImage := 0
		for i := range req.Multimodal {
			it := &req.Multimodal[i]
			imgs[i], err = c.item(ctx, mc, it, nImage)
			if err != nil {
				return profiles.TokenCounts{}, Raw{}, err
			}
			if it.Kind == profiles.KindImage {
				nImage++
				wrappers += mc.img.WrapperTokens
			}
			image += imgs[i].Tokens
		}
	}
	raw := Raw{Model: req.Model, Text: tr.Tokens + wrappers, Image: image}
	out := profiles.TokenCounts{Text: raw.Text, Image: raw.Image, Images: imgs, Backend: tr.Backend, Counted: true}
	if c.p.CalibrateFromUsage {
		rt, ri := c.cal.Factors(req.Model)
		out.Text = int(math.Round(float64(raw.Text) * rt))
		out.Image = int(math.Round(float64(raw.Image) * ri))
	}
	out.Weighted = float64(out.Text) + float64(out.Image)*mc.cost
	if tr.IDs != nil {
		out.IDs = withItems(tr.IDs, imgs)
	} else {
		out.IDs = pseudoIDs(req, imgs)
	}
	c.m.counted.WithLabelValues(tr.Backend, "text").Add(float64(out.Text))
	if out.Image > 0 {
		c.m.counted.WithLabelValues(tr.Backend, "image").Add(float64(out.Image))
	}
	return out, raw, nil
}

// Sampled hashing: below sampleAll bytes the whole URL is hashed; above,
// its length, head, tail and sampleWindows evenly spread windows.
const (
	sampleAll     = 64 << 10
	sampleEdge    = 4 << 10
	sampleWindows = 64
	sampleWindow  = 256
)

// SampledItemHash hashes a large data URL from 24 KiB of it: its length,
// first and last 4 KiB and 64 windows of 256 bytes spread evenly. Two
// different images of identical length that agree on every sampled byte
// collide; the cost is a routing hint (encoder-cache affinity, prefix
// match), never a wrong answer, since engines hash content themselves.
func SampledItemHash(kind, url string) uint64 {
	if len(url) <= sampleAll {
		return ItemHash(kind, url)
	}
	d := xxhash.New()
	_, _ = d.WriteString(kind)
	var n [9]byte
	n[0] = 1 // distinct from the full hash's NUL separator
	for i := range 8 {
		n[1+i] = byte(uint64(len(url)) >> (8 * i))
	}
	_, _ = d.Write(n[:])
	_, _ = d.WriteString(url[:sampleEdge])
	step := (len(url) - 2*sampleEdge - sampleWindow) / sampleWindows
	for i := range sampleWindows {
		o := sampleEdge + i*step
		_, _ = d.WriteString(url[o : o+sampleWindow])
	}
	_, _ = d.WriteString(url[len(url)-sampleEdge:])
	return d.Sum64()
}

// ItemHash is the content hash of a multimodal item: xxhash64 of its kind,
// a NUL and its URL string (the whole data: URL, or the remote URL). Two
// byte-identical data URLs hash alike; the same picture re-encoded does
// not.
func ItemHash(kind, url string) uint64 {
	d := xxhash.New()
	_, _ = d.WriteString(kind)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(url)
	return d.Sum64()
}

func (c *Counter) item(ctx context.Context, mc modelConf, it *profiles.MultimodalItem, nImage int) (profiles.ImageTokens, error) {
	out := profiles.ImageTokens{}
	if c.p.ImageHash == "full" {
		out.Hash = ItemHash(it.Kind, it.URL)
	} else {
		out.Hash = SampledItemHash(it.Kind, it.URL)
	}
	def := c.p.Estimate.Image.DefaultResolution
	switch it.Kind {
	case profiles.KindAudio:
		out.Tokens, out.Default = c.p.AudioTokens, true
		return out, nil
	case profiles.KindVideo:
		out.Width, out.Height, out.Default = def.Width, def.Height, true
		n, err := mc.img.VideoTokens(c.p.VideoFrames, def.Width, def.Height)
		out.Tokens = n
		return out, err
	}
	w, h, reason, err := c.imageSize(ctx, it.URL)
	if err != nil {
		kind := "error"
		var ie *imagesize.Error
		if errors.As(err, &ie) {
			kind = string(ie.Kind)
		}
		if c.p.OnImageError == "reject" {
			c.m.imageErrors.WithLabelValues(kind, "reject").Inc()
			return out, profiles.BadRequest("%s: %v", itemWhere(it, nImage), err)
		}
		c.m.imageErrors.WithLabelValues(kind, "default").Inc()
		reason = "image_error"
	}
	if reason != "" {
		w, h = def.Width, def.Height
		out.Default = true
		c.m.defaults.WithLabelValues(reason).Inc()
	}
	out.Width, out.Height = w, h
	n, err := mc.img.Tokens(w, h)
	if err != nil {
		if c.p.OnImageError == "reject" || out.Default {
			c.m.imageErrors.WithLabelValues("formula", "reject").Inc()
			return out, profiles.BadRequest("%s: %v", itemWhere(it, nImage), err)
		}
		c.m.imageErrors.WithLabelValues("formula", "default").Inc()
		c.m.defaults.WithLabelValues("image_error").Inc()
		out.Width, out.Height, out.Default = def.Width, def.Height, true
		if n, err = mc.img.Tokens(def.Width, def.Height); err != nil {
			return out, fmt.Errorf("default resolution: %w", err)
		}
	}
	out.Tokens = n
	return out, nil
}

func itemWhere(it *profiles.MultimodalItem, nImage int) string {
	if it.Message >= 0 {
		return fmt.Sprintf("messages[%d]: image %d", it.Message, nImage)
	}
	return fmt.Sprintf("image %d", nImage)
}

// imageSize returns the image's size, or a reason to use the default
// resolution, or an error about the image itself.
func (c *Counter) imageSize(ctx context.Context, u string) (w, h int, defaultReason string, err error) {
	if len(u) >= 5 && strings.EqualFold(u[:5], "data:") {
		info, err := imagesize.FromDataURL(u, c.lim)
		if err != nil {
			return 0, 0, "", err
		}
		return info.Width, info.Height, "", nil
	}
	if c.fetch == nil {
		return 0, 0, "remote_url", nil
	}
	info, cached, err := c.fetch.size(ctx, u)
	if err != nil {
		c.m.fetches.WithLabelValues("error").Inc()
		return 0, 0, "fetch_failed", nil
	}
	if cached {
		c.m.fetches.WithLabelValues("cached").Inc()
	} else {
		c.m.fetches.WithLabelValues("ok").Inc()
	}
	return info.Width, info.Height, "", nil
}

// Observe learns from a response's usage.prompt_tokens.
func (c *Counter) Observe(raw Raw, promptTokens int) {
	kind, ratio := c.cal.Observe(raw.Model, raw.Text, raw.Image, promptTokens)
	if kind == "" {
		return
	}
	// Model names come from clients: a label value must be valid UTF-8 or
	// the metrics library panics.
	key := strings.ToValidUTF8(c.cal.Key(raw.Model), "\uFFFD")
	c.m.samples.WithLabelValues(key, kind).Inc()
	c.m.ratio.WithLabelValues(key, kind).Set(ratio)
}
