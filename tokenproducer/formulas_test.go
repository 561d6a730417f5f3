package tokenproducer

import (
	"strings"
	"testing"
)

func TestImageTokens(t *testing.T) {
	qwen2 := func(minP, maxP int) ImageModel {
		m, _ := NewImageModel(FamilyQwen2VL)
		if minP > 0 {
			m.MinPixels, m.MaxPixels = minP, maxP
		}
		return m
	}
	qwen3, _ := NewImageModel(FamilyQwen3VL)
	llava15, _ := NewImageModel(FamilyLLaVA15)
	next, _ := NewImageModel(FamilyLLaVANeXT)
	est, _ := NewImageModel(FamilyEstimate)
	static := est
	static.Mode, static.StaticTokens = "static", 300
	cases := []struct {
		name string
		m    ImageModel
		w, h int
		want int
	}{
		// Test vectors (multimodal.md): 1280×720 → 704×1280 → 880.
		{"qwen3 1280x720", qwen3, 1280, 720, 880},
		// 200×300: 192×288 < 65536 → β=√(65536/60000) → 224×320 → 70.
		{"qwen3 200x300", qwen3, 200, 300, 70},
		// 720/32 = 22.5 rounds half to even (22), not up (23 → 920).
		{"qwen3 half-even", qwen3, 720, 720, 484},
		// Qwen2-VL: 28 px factor, 784 px per token.
		{"qwen2 448x448", qwen2(0, 0), 448, 448, 256},
		{"qwen2 1280x720", qwen2(0, 0), 1280, 720, 1196}, // 728×1288 → 26·46
		// At the min bound: 56×56 = 3136 exactly → 4 tokens; smaller scales up to it.
		{"qwen2 min exact", qwen2(0, 0), 56, 56, 4},
		{"qwen2 min scale-up", qwen2(0, 0), 20, 20, 4}, // β=2.8 → 56×56
		// At the max bound with the processor-class default 1003520 (1280 tokens).
		{"qwen2 max exact", qwen2(3136, 1003520), 1120, 896, 1280},
		{"qwen2 max scale-down", qwen2(3136, 1003520), 4000, 3000, 1230}, // 840×1148, see TestSmartResizeBounds
		// Published configs (12845056): 4000×3000 fits untouched.
		{"qwen2 max published", qwen2(0, 0), 4000, 3000, 15301}, // 2996×4004 / 784
		// Odd aspect ratio 150:1.
		{"qwen2 odd aspect", qwen2(0, 0), 3000, 20, 107}, // 28×2996
		{"llava-1.5", llava15, 1920, 1080, 576},
		{"llava-1.5 tiny", llava15, 7, 7, 576},
		{"llava-next 336x336", next, 336, 336, 1176},
		{"llava-next 672x672", next, 672, 672, 2928},
		{"estimate dynamic", est, 1280, 720, 900},
		{"estimate dynamic floor 1", est, 10, 10, 1},
		{"estimate static", static, 1280, 720, 300},
	}
	for _, c := range cases {
		got, err := c.m.Tokens(c.w, c.h)
		if err != nil || got != c.want {
			t.Errorf("%s: %dx%d → %d, %v; want %d", c.name, c.w, c.h, got, err, c.want)
		}
	}
}

func TestSmartResizeBounds(t *testing.T) {
	// 4000×3000 over 1003520: β = √(12e6/1003520) = 3.458;
	// h = floor(3000/3.458/28)·28 = 30·28 = 840, w = floor(4000/3.458/28)·28 = 41·28 = 1148.
	h, w, err := SmartResize(3000, 4000, 28, 3136, 1003520)
	if err != nil || h != 840 || w != 1148 {
		t.Fatalf("SmartResize(3000,4000) = %d×%d, %v; want 840×1148", h, w, err)
	}
	if h*w > 1003520 {
		t.Fatalf("result %d over max_pixels", h*w)
	}
	// 20×3000 (150:1): h rounds to 28, w to 3000/28=107.14 → 107·28 = 2996; 28·2996 = 83888 ≥ 3136.
	h, w, err = SmartResize(20, 3000, 28, 3136, 12845056)
	if err != nil || h != 28 || w != 2996 {
		t.Fatalf("SmartResize(20,3000) = %d×%d, %v; want 28×2996", h, w, err)
	}
	if _, _, err := SmartResize(10, 2010, 28, 3136, 12845056); err == nil || !strings.Contains(err.Error(), "aspect ratio must be smaller than 200") {
		t.Fatalf("aspect 201: %v", err)
	}
	if _, _, err := SmartResize(10, 2000, 28, 3136, 12845056); err != nil {
		t.Fatalf("aspect exactly 200 is allowed: %v", err)
	}
}

func TestFamilyForModel(t *testing.T) {
	for model, want := range map[string]Family{
		"Qwen/Qwen3-VL-32B-Instruct":        FamilyQwen3VL,
		"Qwen/Qwen2.5-VL-7B-Instruct":       FamilyQwen25VL,
		"qwen2_vl_7b":                       FamilyQwen2VL,
		"Qwen/Qwen2-VL-2B":                  FamilyQwen2VL,
		"llava-hf/llava-v1.6-mistral-7b-hf": FamilyLLaVANeXT,
		"llava-hf/llava-1.5-7b-hf":          FamilyLLaVA15,
		"meta-llama/Llama-3.1-8B-Instruct":  FamilyEstimate,
		"":                                  FamilyEstimate,
	} {
		if got := FamilyForModel(model); got != want {
			t.Errorf("FamilyForModel(%q) = %s, want %s", model, got, want)
		}
	}
}

func TestVideoTokens(t *testing.T) {
	q, _ := NewImageModel(FamilyQwen3VL)
	got, err := q.VideoTokens(16, 1280, 720)
	if err != nil || got != 8*880 {
		t.Fatalf("qwen3 16 frames → %d, %v; want %d", got, err, 8*880)
	}
	l, _ := NewImageModel(FamilyLLaVA15)
	if got, _ := l.VideoTokens(4, 10, 10); got != 4*576 {
		t.Fatalf("llava 4 frames → %d", got)
	}
}
