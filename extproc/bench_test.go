package extproc_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

// chatOfTokens builds a chat body of about n tokens (≈ 4 bytes of English
// text per token) with a system and a user message, newlines and quotes
// that JSON must escape.
func chatOfTokens(n int) string {
	words := []string{"the", "router", "keeps", "a", "request", "on", "its", "prefix", "until", "saturated", "then", "spills", "\\\"quoted\\\"", "tokens", "cache", "decode\\n"}
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	b.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"stream_options":{"include_usage":true},"max_tokens":256,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"`)
	for b.Len() < n*4 {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
	}
	b.WriteString(`"}]}`)
	return b.String()
}

// envoyChunk is the size of the body chunks Envoy forwards (its default
// buffer watermark per read is in this range).
const envoyChunk = 16 << 10

// BenchmarkExtProcRoundTrip drives one request per iteration through the
// real gRPC server over loopback exactly as Envoy does: request headers,
// body in 16 KiB chunks, headers answer + body streamed back, response
// headers, one SSE body chunk with usage and end of stream. "req-p50/p99-ms"
// is the request phase (first message sent → last body chunk back: what
// ext_proc adds before Envoy can forward the request); "rt-p99-ms" the
// whole exchange. The default config over 100 endpoints schedules.
func BenchmarkExtProcRoundTrip(b *testing.B) {
	for _, tokens := range []int{8000, 100000} {
		b.Run(fmt.Sprintf("tokens=%dk", tokens/1000), func(b *testing.B) {
			st := discovery.NewStore()
			specs := make([]discovery.Spec, 100)
			for i := range specs {
				specs[i] = discovery.Spec{Name: fmt.Sprintf("d-%03d", i), Address: fmt.Sprintf("10.1.0.%d:8000", i), Labels: map[string]string{profiles.RoleLabel: profiles.RoleDecode}}
			}
			st.Update(specs)
			s, err := director.LoadScheduler("", profiles.Options{Endpoints: st})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			h := serveDirector(b, director.New(s, director.Options{}), st.Synced)
			body := chatOfTokens(tokens)
			var msgs []*extprocv3.ProcessingRequest
			msgs = append(msgs, reqHeaders("bench", false, nil, "content-length", fmt.Sprint(len(body))))
			for i := 0; i < len(body); i += envoyChunk {
				msgs = append(msgs, reqBody(body[i:min(i+envoyChunk, len(body))], i+envoyChunk >= len(body)))
			}
			rh := respHeaders(nil, false, ":status", "200", "content-type", "text/event-stream")
			rb := respBody("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8000,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n", true)
			ctx := context.Background()
			var reqLat, rtLat []time.Duration
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				sc, err := h.client.Process(ctx)
				if err != nil {
					b.Fatal(err)
				}
				s := &stream{t: b, s: sc}
				s.send(msgs...)
				r := s.recvRouting(true)
				t1 := time.Now()
				if len(r.body) != len(body) {
					b.Fatalf("body %d bytes back, want %d", len(r.body), len(body))
				}
				s.send(rh)
				s.recv()
				s.send(rb)
				s.recv()
				if err := sc.CloseSend(); err != nil {
					b.Fatal(err)
				}
				_, _ = sc.Recv() // io.EOF once the server ends the stream
				t2 := time.Now()
				reqLat = append(reqLat, t1.Sub(t0))
				rtLat = append(rtLat, t2.Sub(t0))
			}
			b.ReportMetric(pct(reqLat, 50), "req-p50-ms")
			b.ReportMetric(pct(reqLat, 99), "req-p99-ms")
			b.ReportMetric(pct(rtLat, 99), "rt-p99-ms")
			b.ReportMetric(float64(len(body))/1024, "body-KiB")
		})
	}
}

func pct(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p+99)/100-1)
	return float64(s[max(i, 0)].Microseconds()) / 1000
}

// BenchmarkParseRequest isolates profiles.ParseRequest (encoding/json) on
// the same bodies: the dominant cost of the round trip for large prompts.
func BenchmarkParseRequest(b *testing.B) {
	for _, tokens := range []int{8000, 100000} {
		b.Run(fmt.Sprintf("tokens=%dk", tokens/1000), func(b *testing.B) {
			body := []byte(chatOfTokens(tokens))
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := profiles.ParseRequest("/v1/chat/completions", map[string]string{}, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
