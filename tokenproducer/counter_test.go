package tokenproducer

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

func TestCountEstimateText(t *testing.T) {
	c := newCounter(t, "", nil)
	req := parse(t, chatBody(t, "meta-llama/Llama-3.1-8B", textMsg("system", "be brief"), textMsg("user", strings.Repeat("a", 100))))
	tc, raw, err := c.Count(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	// role + text bytes: 6+8 + 4+100 = 118 → ceil(118/4) = 30.
	if tc.Text != 30 || tc.Image != 0 || tc.Weighted != 30 || !tc.Counted || tc.Backend != BackendEstimate || raw.Text != 30 {
		t.Fatalf("got %+v raw %+v", tc, raw)
	}
	// Pseudo-ids pack PromptText 4 bytes to an id, like the prefix index's fallback.
	if want := (len(req.PromptText()) + 3) / 4; len(tc.IDs) != want {
		t.Fatalf("ids %d, want %d", len(tc.IDs), want)
	}
	if tc.IDs[0] != uint32('s')|uint32('y')<<8|uint32('s')<<16|uint32('t')<<24 {
		t.Fatalf("first pseudo-id %#x", tc.IDs[0])
	}
	// Tools JSON counts.
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": []any{textMsg("user", "hi")}, "tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}})
	tc2, _, _ := c.Count(context.Background(), parse(t, b), nil)
	if want := (len("user") + 2 + len(`[{"type":"function","function":{"name":"get_weather"}}]`) + 3) / 4; tc2.Text != want {
		t.Fatalf("with tools: %d, want %d", tc2.Text, want)
	}
}

func TestCountQwen3Images(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCounter(t, `{"imageTokenCost": 2.5}`, reg)
	a := pngDataURL(t, 1280, 720)
	b := pngDataURL(t, 200, 300)
	req := parse(t, chatBody(t, "Qwen/Qwen3-VL-32B-Instruct", imageMsg("what is this?", a, b, a), textMsg("user", "http://example.invalid/x.png")))
	tc, _, err := c.Count(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tc.Images) != 3 {
		t.Fatalf("images %+v", tc.Images)
	}
	want := []profiles.ImageTokens{{Width: 1280, Height: 720, Tokens: 880}, {Width: 200, Height: 300, Tokens: 70}, {Width: 1280, Height: 720, Tokens: 880}}
	for i, w := range want {
		g := tc.Images[i]
		if g.Width != w.Width || g.Height != w.Height || g.Tokens != w.Tokens || g.Default || g.Hash == 0 {
			t.Fatalf("image %d: %+v, want %+v", i, g, w)
		}
	}
	if tc.Images[0].Hash != tc.Images[2].Hash || tc.Images[0].Hash == tc.Images[1].Hash {
		t.Fatalf("hashes: same image must hash alike, different apart: %x %x %x", tc.Images[0].Hash, tc.Images[1].Hash, tc.Images[2].Hash)
	}
	if tc.Image != 1830 {
		t.Fatalf("image tokens %d, want 1830", tc.Image)
	}
	// Text: "user"+"what is this?" (17) + "user"+URL text (32) = 49 → 13, + 2 wrappers × 3 images.
	if tc.Text != 13+6 {
		t.Fatalf("text tokens %d, want 19", tc.Text)
	}
	if tc.Weighted != 19+1830*2.5 {
		t.Fatalf("weighted %v", tc.Weighted)
	}
	// ids: text pseudo-ids then 1830 hash ids after the first message.
	if len(tc.IDs) < 1830 {
		t.Fatalf("ids %d", len(tc.IDs))
	}
}

func TestCountRemoteURLAndFamilies(t *testing.T) {
	body := chatBody(t, "llava-hf/llava-1.5-7b-hf", imageMsg("x", "https://example.invalid/cat.jpg"))
	c := newCounter(t, `{"estimate":{"image":{"defaultResolution":{"width":640,"height":480}}}}`, nil)
	tc, _, err := c.Count(context.Background(), parse(t, body), nil)
	if err != nil || tc.Image != 576 || !tc.Images[0].Default || tc.Images[0].Width != 640 {
		t.Fatalf("llava remote: %+v %v", tc, err)
	}
	// Unknown model: llm-d dynamic estimate of the default resolution.
	body = chatBody(t, "some-model", imageMsg("x", "https://example.invalid/cat.jpg"))
	tc, _, _ = c.Count(context.Background(), parse(t, body), nil)
	if tc.Image != 640*480/1024 {
		t.Fatalf("dynamic: %d", tc.Image)
	}
	c = newCounter(t, `{"estimate":{"image":{"mode":"static","staticToken":99}}}`, nil)
	tc, _, _ = c.Count(context.Background(), parse(t, body), nil)
	if tc.Image != 99 {
		t.Fatalf("static: %d", tc.Image)
	}
	// Family by parameter beats the name; per-model overrides beat both.
	c = newCounter(t, `{"family":"qwen2-vl","models":{"tiny":{"maxPixels":3136,"imageTokenCost":3}}}`, nil)
	img := pngDataURL(t, 1120, 896)
	tc, _, _ = c.Count(context.Background(), parse(t, chatBody(t, "some-model", imageMsg("", img))), nil)
	if tc.Image != 1280 {
		t.Fatalf("qwen2 by parameter: %d", tc.Image)
	}
	tc, _, _ = c.Count(context.Background(), parse(t, chatBody(t, "TINY", imageMsg("", img))), nil)
	// β = √(1003520/3136): 28×56 → 2 tokens.
	if tc.Image != 2 || tc.Weighted != float64(tc.Text)+6 {
		t.Fatalf("per-model maxPixels 3136 and cost 3: %+v", tc)
	}
}

func TestCountBadImages(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCounter(t, "", reg)
	cases := map[string]string{
		"data:image/png;base64,iVBO*w0K":           "messages[0]: image 0: png: invalid base64: illegal character '*' at offset 4",
		"data:image/png;base64,aGVsbG8gd29ybGQ=":   "messages[0]: image 0: unknown image format",
		"data:image/png;base64,iVBORw0KGgoAAAANSU": "messages[0]: image 0: png: truncated header",
	}
	for u, msg := range cases {
		_, _, err := c.Count(context.Background(), parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("x", u))), nil)
		var se *profiles.StatusError
		if !errors.As(err, &se) || se.Code != http.StatusBadRequest || !strings.HasPrefix(se.Message, msg) {
			t.Errorf("%s: got %v, want 400 %q", u, err, msg)
		}
		if profiles.HTTPStatus(err) != 400 || !strings.Contains(profiles.ClientMessage(err), "image 0") {
			t.Errorf("front-door mapping: %d %q", profiles.HTTPStatus(err), profiles.ClientMessage(err))
		}
	}
	// Aspect ratio over 200 is a 400 too.
	_, _, err := c.Count(context.Background(), parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("x", pngDataURL(t, 2010, 10)))), nil)
	if profiles.HTTPStatus(err) != 400 || !strings.Contains(err.Error(), "aspect ratio") {
		t.Fatalf("aspect: %v", err)
	}
	if got := counterValue(t, reg, "spillway_token_image_errors_total", map[string]string{"reason": "bad_base64", "action": "reject"}); got != 1 {
		t.Fatalf("image_errors_total{bad_base64,reject} = %v", got)
	}
	// onImageError: default counts the default resolution instead.
	reg = prometheus.NewRegistry()
	c = newCounter(t, `{"onImageError":"default"}`, reg)
	tc, _, err := c.Count(context.Background(), parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("x", "data:image/png;base64,!!!!"))), nil)
	if err != nil || !tc.Images[0].Default || tc.Images[0].Tokens != 1024 {
		t.Fatalf("default: %+v %v", tc.Images, err)
	}
	if got := counterValue(t, reg, "spillway_token_image_default_resolution_total", map[string]string{"reason": "image_error"}); got != 1 {
		t.Fatalf("default_resolution_total = %v", got)
	}
}

func TestCountVideoAudio(t *testing.T) {
	c := newCounter(t, `{"videoFrames": 4, "audioTokens": 100, "estimate":{"image":{"defaultResolution":{"width":1280,"height":720}}}}`, nil)
	b, _ := json.Marshal(map[string]any{"model": "Qwen/Qwen3-VL-8B", "messages": []any{map[string]any{"role": "user", "content": []any{
		part{"type": "video_url", "video_url": part{"url": "https://x.invalid/v.mp4"}},
		part{"type": "input_audio", "input_audio": part{"data": "AAAA", "format": "wav"}},
	}}}})
	tc, _, err := c.Count(context.Background(), parse(t, b), nil)
	if err != nil || tc.Images[0].Tokens != 2*880 || tc.Images[1].Tokens != 100 || tc.Image != 1860 {
		t.Fatalf("%+v %v", tc, err)
	}
}

func TestParamsStrict(t *testing.T) {
	f, ok := profiles.Lookup(PluginType)
	if !ok {
		t.Fatal("token-producer not registered")
	}
	for raw, want := range map[string]string{
		`{"bakend":"estimate"}`:                          "unknown parameter \"bakend\" (accepted parameters: backend (string)",
		`{"backend":"sentencepiece"}`:                    "want estimate, tiktoken or model-server",
		`{"family":"gpt-vision"}`:                        "unknown family",
		`{"onImageError":"ignore"}`:                      "want reject or default",
		`{"estimate":{"image":{"mode":"exact"}}}`:        "want dynamic or static",
		`{"estimate":{"image":{"dynamic":{"factr":3}}}}`: "unknown parameter",
		`{"minPixels":5000,"maxPixels":100}`:             "maxPixels 100 < minPixels 5000",
		`{"models":{"m":{"imageTokenCost":-1}}}`:         "imageTokenCost must be ≥ 0",
		`{"modelServer":{"url":"10.0.0.1:8000"}}`:        "want http://",
	} {
		_, err := f("tp", json.RawMessage(raw), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", raw, err, want)
		}
	}
}

func TestSampledHash(t *testing.T) {
	big := "data:image/png;base64," + strings.Repeat("A", 200000)
	other := big[:100] + "B" + big[101:]
	if SampledItemHash("image", big) == SampledItemHash("image", other) {
		t.Fatal("a change in the head must change the sampled hash")
	}
	if SampledItemHash("image", big) == SampledItemHash("image", big+"AAAA") {
		t.Fatal("a change in length must change the sampled hash")
	}
	if SampledItemHash("image", big) != SampledItemHash("image", big) || SampledItemHash("image", big) == ItemHash("image", big) {
		t.Fatal("sampled hash must be stable and distinct from the full hash")
	}
	small := "data:image/png;base64,AAAA"
	if SampledItemHash("image", small) != ItemHash("image", small) {
		t.Fatal("small URLs are hashed whole")
	}
	c := newCounter(t, `{"imageHash":"full"}`, nil)
	tc, _, err := c.Count(context.Background(), parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("", pngDataURL(t, 50, 50)))), nil)
	if err != nil || tc.Images[0].Hash == 0 {
		t.Fatalf("%+v %v", tc, err)
	}
}
