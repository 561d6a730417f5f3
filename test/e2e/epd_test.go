package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/test/sim"
)

// pngDataURL encodes a w×h PNG as a data: URL.
func pngDataURL(t *testing.T, w, h int) string {
	t.Helper()
	im := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			im.Set(x, y, color.RGBA{uint8(x), uint8(y), 128, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, im); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

// tokenProducerQwen2VL counts images with Qwen2-VL's smart_resize: a
// 448×448 image is (448/28)² = 256 tokens, which is also what the
// simulator's profile charges an image.
const tokenProducerQwen2VL = `  - type: token-producer
    parameters:
      family: qwen2-vl
`

// TestEPDImageThroughGatewayAndSidecar: the shipped E-P-D config with the
// token producer; a chat request with a PNG data: URL runs its encoder leg
// on the simulated encoder the picker named, prefills remotely, and the
// token producer counted the image's tokens as the engine did.
func TestEPDImageThroughGatewayAndSidecar(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Encode: 2, Prefill: 1, Decode: 1}, kvtransfer.Options{})
	p := startPicker(t, withPlugin(t, readConfig(t, "../bench/configs/epd-matched.yaml"), tokenProducerQwen2VL), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)

	const imageTokens = 256
	text := words("epd", 20)
	body := fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":%q},{"type":"image_url","image_url":{"url":%q}}]}]}`,
		model, text, pngDataURL(t, 448, 448))
	before := finished(fl.Fleet)
	resp, out := post(t, gw+"/v1/chat/completions", body, map[string]string{director.HeaderDebug: "1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if got := resp.Header.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillRemote {
		t.Fatalf("%s = %q, want remote", kvtransfer.HeaderPrefill, got)
	}
	dec := decision(t, resp.Header.Get(director.HeaderDecision))
	enc := dec[director.HeaderEncoders]
	after := finished(fl.Fleet)
	var encoders int
	for _, e := range fl.ByRole(sim.RoleEncode) {
		n := after[e.Address] - before[e.Address]
		encoders += int(n)
		if want := map[bool]uint64{true: 1}[e.Address == enc]; n != want {
			t.Errorf("encoder %s served %d requests, want %d (picker named %q)", e.Address, n, want, enc)
		}
	}
	if encoders != 1 {
		t.Fatalf("%d encoder legs ran, want 1 (decision %q)", encoders, resp.Header.Get(director.HeaderDecision))
	}
	var r struct{ Usage usage }
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	// Engine: user role token + 20 words + the image + assistant token.
	wantPrompt := 1 + 20 + imageTokens + 1
	if r.Usage.PromptTokens != wantPrompt {
		t.Errorf("engine prompt_tokens %d, want %d", r.Usage.PromptTokens, wantPrompt)
	}
	if got := p.metric(t, "spillway_tokens_counted_total", map[string]string{"kind": "image"}); got != imageTokens {
		t.Errorf("token producer counted %v image tokens, want %d", got, imageTokens)
	}
	if n := p.metric(t, "spillway_token_image_errors_total", nil); n != 0 {
		t.Errorf("%v image errors", n)
	}
	p.waitUnloaded(t)
}

// TestEPDResponsesImage: the same E-P-D path for /v1/responses, whose
// images are input_image parts: the picker sees the image (encoder leg
// named and run, image tokens counted) and the engine counts it too.
func TestEPDResponsesImage(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Encode: 1, Prefill: 1, Decode: 1}, kvtransfer.Options{})
	p := startPicker(t, withPlugin(t, readConfig(t, "../bench/configs/epd-matched.yaml"), tokenProducerQwen2VL), fl.specs, 0)
	p.waitScraped(t)
	gw := startGateway(t, p)
	body := fmt.Sprintf(`{"model":%q,"max_output_tokens":3,"input":[{"role":"user","content":[{"type":"input_text","text":"what is this"},{"type":"input_image","image_url":%q}]}]}`,
		model, pngDataURL(t, 448, 448))
	resp, out := post(t, gw+"/v1/responses", body, map[string]string{director.HeaderDebug: "1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	enc := fl.ByRole(sim.RoleEncode)[0]
	if got := decision(t, resp.Header.Get(director.HeaderDecision))[director.HeaderEncoders]; got != enc.Address {
		t.Errorf("picker named encoders %q, want %s (decision %q)", got, enc.Address, resp.Header.Get(director.HeaderDecision))
	}
	if n := enc.Engine.Snapshot().Finished; n != 1 {
		t.Errorf("encoder served %d requests, want 1", n)
	}
	if got := resp.Header.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillRemote {
		t.Errorf("%s = %q, want remote", kvtransfer.HeaderPrefill, got)
	}
	if pt, _ := cachedIn(t, string(out)); pt != 1+3+256+1 {
		t.Errorf("engine input_tokens %d, want %d", pt, 1+3+256+1)
	}
	if got := p.metric(t, "spillway_tokens_counted_total", map[string]string{"kind": "image"}); got != 256 {
		t.Errorf("token producer counted %v image tokens, want 256", got)
	}
	p.waitUnloaded(t)
}
