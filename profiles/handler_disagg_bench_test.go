package profiles_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

// BenchmarkEPDSchedule is one full E-P-D schedule: producers, the decode
// profile, the encode profile once per image (2 images) and the prefill
// profile, for an 8k-token prompt, at n endpoints per pool.
func BenchmarkEPDSchedule(b *testing.B) {
	for _, n := range []int{4, 16, 64, 256} {
		b.Run(fmt.Sprintf("perPool=%d", n), func(b *testing.B) {
			eps := pool(map[string]int{profiles.RoleDecode: n, profiles.RolePrefill: n, profiles.RoleEncode: n})
			s, err := profiles.LoadConfigBytes("bench.yaml", []byte(epdConfig()), profiles.Options{Endpoints: eps, Registerer: prometheus.NewRegistry()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			for _, p := range s.Plugins() {
				if sd, ok := p.(profiles.Seeder); ok {
					sd.Seed(1)
				}
			}
			body := []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat("word ", 6400) +
				`"},{"type":"image_url","image_url":{"url":"http://img/a.png"}},{"type":"image_url","image_url":{"url":"http://img/b.png"}}]}]}`)
			ids := make([]uint32, 8192)
			for i := range ids {
				ids[i] = uint32(i*7919) % 151000
			}
			mk := func() *profiles.Request {
				req, err := profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{}, body)
				if err != nil {
					b.Fatal(err)
				}
				// What the token producer would fill: 8192 tokens, two
				// 1280×720 images (880 tokens each on Qwen3-VL).
				req.Tokens = profiles.TokenCounts{Text: 8192 - 1760, Image: 1760, Weighted: 8192, IDs: ids, Counted: true,
					Images: []profiles.ImageTokens{{Width: 1280, Height: 720, Tokens: 880, Hash: 11}, {Width: 1280, Height: 720, Tokens: 880, Hash: 22}}}
				return req
			}
			ctx := context.Background()
			reqs := make([]*profiles.Request, 256)
			for i := range reqs {
				reqs[i] = mk()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				res, err := s.Schedule(ctx, reqs[i%len(reqs)])
				if err != nil {
					b.Fatal(err)
				}
				if res.Decision != profiles.DecisionEncodePrefillDecode {
					b.Fatalf("decision %s/%s", res.Decision, res.Reason)
				}
			}
		})
	}
}
