package kvtransfer

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkSidecarOverhead measures what the sidecar adds to a P/D request
// (wall time minus time spent waiting on the legs), for a non-streamed and
// a streamed chat request with an 8k-token-sized body, and reports p50/p99.
func BenchmarkSidecarOverhead(b *testing.B) {
	prompt := strings.Repeat("word ", 6400) // ≈ 32 KB, an 8k-token prompt
	for _, tc := range []struct {
		name string
		body string
	}{
		{"chat", `{"model":"m","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":64}`},
		{"chat-stream", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":64}`},
		{"chat-2images", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + prompt + `"},{"type":"image_url","image_url":{"url":"http://i/a.png"}},{"type":"image_url","image_url":{"url":"http://i/b.png"}}]}],"max_tokens":64}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := func(fn func(http.ResponseWriter, *http.Request, leg)) *httptest.Server {
				return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					// The fakes do as little as possible: the benchmark measures
					// the sidecar, and they share its CPUs.
					raw, _ := io.ReadAll(r.Body)
					l := leg{Path: r.URL.Path, Raw: raw, Body: map[string]any{}}
					if strings.Contains(string(raw), `"stream":true`) {
						l.Body["stream"] = true
					}
					fn(w, r, l)
				}))
			}
			dec, pre, enc := h(okDecode), h(okPrefill), h(okEncoder)
			defer dec.Close()
			defer pre.Close()
			defer enc.Close()
			pa, ea := strings.TrimPrefix(pre.URL, "http://"), strings.TrimPrefix(enc.URL, "http://")
			al, _ := NewAllowlist(pa, ea)
			var mu sync.Mutex
			var over []time.Duration
			sc, err := New(Options{Decoder: dec.URL, Allow: al, Logger: slog.New(slog.DiscardHandler),
				ObserveOverhead: func(d time.Duration) { mu.Lock(); over = append(over, d); mu.Unlock() }})
			if err != nil {
				b.Fatal(err)
			}
			defer sc.Close()
			front := httptest.NewServer(sc)
			defer front.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			do := func() {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, front.URL+PathChatCompletions, strings.NewReader(tc.body))
				req.Header.Set(HeaderPrefiller, pa)
				if strings.Contains(tc.name, "images") {
					req.Header.Set(HeaderEncoders, ea)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			for range 50 { // warm connections
				do()
			}
			mu.Lock()
			over = over[:0]
			mu.Unlock()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				do()
			}
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			if len(over) == 0 {
				return
			}
			slices.Sort(over)
			q := func(p float64) float64 {
				return float64(over[min(len(over)-1, int(p*float64(len(over))))].Microseconds())
			}
			b.ReportMetric(q(0.5), "overhead-p50-µs")
			b.ReportMetric(q(0.99), "overhead-p99-µs")
		})
	}
}
