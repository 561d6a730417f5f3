package tokenproducer

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

func TestRemoteFetch(t *testing.T) {
	u := pngDataURL(t, 1280, 720)
	pngBytes, _ := base64.StdEncoding.DecodeString(u[strings.IndexByte(u, ',')+1:])
	var ranges atomic.Value
	var hits atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		ranges.Store(r.Header.Get("Range"))
		switch r.URL.Path {
		case "/cat.png":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write(pngBytes) // ignores Range: only MaxBytes are read
		case "/text":
			_, _ = w.Write([]byte("not an image at all"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	reg := prometheus.NewRegistry()
	c := newCounter(t, `{"remoteFetch":{"enabled":true,"maxBytes":4096,"timeout":"2s"}}`, reg)
	count := func(url string) profiles.ImageTokens {
		tc, _, err := c.Count(context.Background(), parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("x", url))), nil)
		if err != nil {
			t.Fatal(err)
		}
		return tc.Images[0]
	}
	im := count(ts.URL + "/cat.png")
	if im.Width != 1280 || im.Height != 720 || im.Tokens != 880 || im.Default {
		t.Fatalf("fetched %+v", im)
	}
	if got := ranges.Load(); got != "bytes=0-4095" {
		t.Fatalf("Range %q", got)
	}
	// Cached: no second fetch.
	count(ts.URL + "/cat.png")
	if hits.Load() != 1 {
		t.Fatalf("%d fetches, want 1 (cached)", hits.Load())
	}
	// Failures count at the default resolution, never a 400.
	for _, p := range []string{"/text", "/missing"} {
		if im := count(ts.URL + p); !im.Default || im.Width != 1024 {
			t.Fatalf("%s: %+v", p, im)
		}
	}
	if got := counterValue(t, reg, "spillway_token_remote_fetch_total", map[string]string{"result": "error"}); got != 2 {
		t.Fatalf("fetch errors %v", got)
	}
	if got := counterValue(t, reg, "spillway_token_remote_fetch_total", map[string]string{"result": "cached"}); got != 1 {
		t.Fatalf("fetch cached %v", got)
	}
	// Disabled (the default): no request leaves the picker.
	before := hits.Load()
	c2 := newCounter(t, "", nil)
	tc, _, _ := c2.Count(context.Background(), parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("x", ts.URL+"/cat.png"))), nil)
	if hits.Load() != before || !tc.Images[0].Default {
		t.Fatal("fetched although remoteFetch is off")
	}
}

func TestTiktokenBackend(t *testing.T) {
	c := newCounter(t, `{"backend":"tiktoken","tiktokenEncoding":"cl100k_base"}`, nil)
	tc, _, err := c.Count(context.Background(), parse(t, chatBody(t, "gpt-4", textMsg("user", "hello world"))), nil)
	if err != nil {
		t.Fatal(err)
	}
	// cl100k: "user" = 1, "hello world" = 2 tokens; + 3 per message + 3 reply priming.
	if tc.Backend != BackendTiktoken || tc.Text != 3+6 || len(tc.IDs) != 3 || tc.IDs[1] != 15339 || tc.IDs[2] != 1917 {
		t.Fatalf("got %+v", tc)
	}
	if _, err := New(Params{Backend: "tiktoken", TiktokenEncoding: "nope"}, nil); err == nil || !strings.Contains(err.Error(), "accepted: cl100k_base") {
		t.Fatalf("bad encoding: %v", err)
	}
}

// Pseudo-ids key the prefix index: identical text gives identical ids (as
// the prefix index's own fallback would), and two prompts that differ only
// in an image share ids up to the image and not after.
func TestPseudoIDsPrefixStable(t *testing.T) {
	c := newCounter(t, "", nil)
	a, b := pngDataURL(t, 100, 100), pngDataURL(t, 101, 100)
	ids := func(url string) []uint32 {
		tc, _, err := c.Count(context.Background(), parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", textMsg("system", strings.Repeat("shared ", 40)), imageMsg("look", url), textMsg("user", "tail"))), nil)
		if err != nil {
			t.Fatal(err)
		}
		return tc.IDs
	}
	x, x2, y := ids(a), ids(a), ids(b)
	if len(x) != len(x2) || x[len(x)-1] != x2[len(x2)-1] {
		t.Fatal("ids not stable")
	}
	common := 0
	for common < min(len(x), len(y)) && x[common] == y[common] {
		common++
	}
	// system (6+1+280+1 = 288 bytes = 72 ids) + "user\nlook\n" (10 bytes → 3 ids, flushed before the image).
	if common != 75 {
		t.Fatalf("prompts share %d ids, want 75 (up to the image)", common)
	}
	// Text-only: exactly the prefix index's fallback packing of PromptText.
	req := parse(t, chatBody(t, "m", textMsg("user", "abcdefg")))
	tc, _, _ := c.Count(context.Background(), req, nil)
	want := []uint32{'u' | 's'<<8 | 'e'<<16 | 'r'<<24, '\n' | 'a'<<8 | 'b'<<16 | 'c'<<24, 'd' | 'e'<<8 | 'f'<<16 | 'g'<<24, '\n'}
	if len(tc.IDs) != 4 || tc.IDs[0] != want[0] || tc.IDs[1] != want[1] || tc.IDs[2] != want[2] || tc.IDs[3] != want[3] {
		t.Fatalf("ids %x, want %x", tc.IDs, want)
	}
}

// The pseudo-ids of a text-only request are exactly what the prefix index
// computes when no token producer ran, so enabling the producer keeps
// every block key.
func TestPseudoIDsMatchPrefixFallback(t *testing.T) {
	c := newCounter(t, "", nil)
	for _, body := range [][]byte{
		chatBody(t, "m", textMsg("system", "you are helpful"), textMsg("user", strings.Repeat("ab c", 333)), textMsg("assistant", "x")),
		[]byte(`{"model":"m","prompt":"a completion prompt of some length"}`),
		[]byte(`{"model":"m","prompt":[[101,102,103,104,105]]}`),
	} {
		req := parse(t, body)
		fallback, _ := prefill.RequestIDs(req)
		tc, _, err := c.Count(context.Background(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tc.IDs, fallback) {
			t.Fatalf("pseudo-ids (%d) differ from the prefix index's fallback (%d)", len(tc.IDs), len(fallback))
		}
	}
}
