package tokenproducer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spillway-llm/spillway/profiles"
)

func fuzzSeeds(t testing.TB) [][]byte {
	return [][]byte{
		chatBody(t, "Qwen/Qwen3-VL-8B", textMsg("system", "s"), imageMsg("what", pngDataURL(t, 64, 32))),
		chatBody(t, "llava-hf/llava-v1.6-mistral-7b-hf", imageMsg("a", "https://x.invalid/a.png", "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg==")),
		chatBody(t, "Qwen/Qwen2-VL-7B", imageMsg("b", "data:image/gif;base64,R0lGODlhAQABAAAAACw=", "data:,x", "data:image/png;base64,!!")),
		[]byte(`{"model":"m","prompt":[[1,2,3],"text"]}`),
		[]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/webp;base64,UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=="}]}],"instructions":"be kind"}`),
		[]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"v"}},{"type":"input_audio","input_audio":{"data":"AA","format":"wav"}}]}],"tools":[{"type":"function"}]}`),
	}
}

// FuzzCount: any body the framework parses is counted or refused with a
// 400, never a panic; counts are consistent.
func FuzzCount(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b)
	}
	reject := newCounter(f, `{"maxImageHeaderBytes": 65536}`, nil)
	lenient := newCounter(f, `{"onImageError":"default","maxImageHeaderBytes": 65536,"calibrateFromUsage":true}`, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parseForFuzz(t, body)
		if err != nil {
			return
		}
		for _, c := range []*Counter{reject, lenient} {
			tc, raw, err := c.Count(context.Background(), req, nil)
			if err != nil {
				if profiles.HTTPStatus(err) != 400 {
					t.Fatalf("error %v is not a 400", err)
				}
				if c == lenient {
					if _, isFormula := err.(*profiles.StatusError); !isFormula {
						t.Fatalf("lenient counter failed: %v", err)
					}
				}
				continue
			}
			if tc.Text < 0 || tc.Image < 0 || len(tc.Images) != len(req.Multimodal) || raw.Image != tc.Image && c == reject {
				t.Fatalf("inconsistent counts %+v raw %+v", tc, raw)
			}
			sum := 0
			for _, im := range tc.Images {
				if im.Tokens < 0 {
					t.Fatalf("negative item tokens %+v", im)
				}
				sum += im.Tokens
			}
			if sum != raw.Image {
				t.Fatalf("items sum %d != image %d", sum, raw.Image)
			}
			c.Observe(raw, tc.Text+tc.Image+1)
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz when SPILLWAY_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("SPILLWAY_WRITE_CORPUS") != "1" {
		t.Skip("set SPILLWAY_WRITE_CORPUS=1 to regenerate testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzCount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, b := range fuzzSeeds(t) {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%02d", i)), []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(b))+")\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// parseForFuzz runs the framework's body parser. A panic there is a bug
// (a client could crash the picker) and fails the target; set
// SPILLWAY_FUZZ_SKIP_PARSE_PANICS=1 to keep fuzzing the counter past a
// known parser panic.
func parseForFuzz(t *testing.T, body []byte) (req *profiles.Request, err error) {
	if os.Getenv("SPILLWAY_FUZZ_SKIP_PARSE_PANICS") == "1" {
		defer func() {
			if r := recover(); r != nil {
				req, err = nil, fmt.Errorf("parser panic: %v", r)
			}
		}()
	}
	return profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{}, body)
}
