package tokenproducer

import (
	"bytes"
	"context"
	"encoding/base64"
	"image"
	"image/png"
	"strings"
	"sync"
	"testing"

	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/tokenproducer/imagesize"
)

// text8k is a chat of ~8k estimated tokens (32 KB of text over 4 messages).
func text8k(b testing.TB) []byte {
	word := "lorem ipsum dolor sit amet, consectetur adipiscing elit. "
	return chatBody(b, "meta-llama/Llama-3.1-8B-Instruct",
		textMsg("system", strings.Repeat(word, 20)),
		textMsg("user", strings.Repeat(word, 180)),
		textMsg("assistant", strings.Repeat(word, 150)),
		textMsg("user", strings.Repeat(word, 212)))
}

func BenchmarkCountText8k(b *testing.B) {
	req := parse(b, text8k(b))
	c := newCounter(b, "", nil)
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	var tc profiles.TokenCounts
	for b.Loop() {
		tc, _, _ = c.Count(context.Background(), req, nil)
	}
	if tc.Text < 7900 || tc.Text > 8300 {
		b.Fatalf("text tokens %d, want ~8k", tc.Text)
	}
}

// BenchmarkParseAndCountText8k includes the framework's body parse.
func BenchmarkParseAndCountText8k(b *testing.B) {
	body := text8k(b)
	c := newCounter(b, "", nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		req, err := profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{}, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := c.Count(context.Background(), req, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCountText8kTiktoken(b *testing.B) {
	req := parse(b, text8k(b))
	c := newCounter(b, `{"backend":"tiktoken"}`, nil)
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Count(context.Background(), req, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// noisyPNGDataURL is a photo-sized PNG: random RGB pixels do not
// compress, so a megapixel is ~3 MB, ~4 MB of base64.
func noisyPNGDataURL(b testing.TB, w, h int) string {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	x := uint32(2463534242)
	for i := range m.Pix {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		m.Pix[i] = byte(x)
	}
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, m); err != nil {
		b.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

var fourImages struct {
	once sync.Once
	body []byte
}

func fourImageBody(b testing.TB) []byte {
	fourImages.once.Do(func() {
		fourImages.body = chatBody(b, "Qwen/Qwen3-VL-32B-Instruct", imageMsg("compare these",
			noisyPNGDataURL(b, 1000, 1000), noisyPNGDataURL(b, 1001, 999), noisyPNGDataURL(b, 999, 1001), noisyPNGDataURL(b, 1000, 1001)))
	})
	return fourImages.body
}

// BenchmarkCount4Images1MPFullHash: the whole count (header parse,
// formula, content hash, ids) of a body with four 1-megapixel PNGs with
// imageHash: full; ns/op ÷ 4 per image.
func BenchmarkCount4Images1MPFullHash(b *testing.B) {
	req := parse(b, fourImageBody(b))
	c := newCounter(b, `{"imageHash":"full"}`, nil)
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	var tc profiles.TokenCounts
	for b.Loop() {
		tc, _, _ = c.Count(context.Background(), req, nil)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4, "ns/image")
	if len(tc.Images) != 4 || tc.Images[0].Tokens != 961 {
		b.Fatalf("images %+v", tc.Images)
	}
}

// BenchmarkImageHeader1MP: header parse only, per image.
func BenchmarkImageHeader1MP(b *testing.B) {
	req := parse(b, fourImageBody(b))
	b.ReportAllocs()
	for b.Loop() {
		for i := range req.Multimodal {
			if _, err := imagesize.FromDataURL(req.Multimodal[i].URL, imagesize.Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4, "ns/image")
}

// BenchmarkItemHash1MP: the content hash of one 1 MP data URL.
func BenchmarkItemHash1MP(b *testing.B) {
	req := parse(b, fourImageBody(b))
	u := req.Multimodal[0].URL
	b.SetBytes(int64(len(u)))
	for b.Loop() {
		ItemHash(profiles.KindImage, u)
	}
}

// BenchmarkParse4Images1MP is the framework's body parse of the same body,
// for scale.
func BenchmarkParse4Images1MP(b *testing.B) {
	body := fourImageBody(b)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{}, body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSampledItemHash1MP(b *testing.B) {
	req := parse(b, fourImageBody(b))
	u := req.Multimodal[0].URL
	for b.Loop() {
		SampledItemHash(profiles.KindImage, u)
	}
}

// BenchmarkCount4Images1MP: the same with the default sampled hash.
func BenchmarkCount4Images1MP(b *testing.B) {
	req := parse(b, fourImageBody(b))
	c := newCounter(b, "", nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Count(context.Background(), req, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4, "ns/image")
}
