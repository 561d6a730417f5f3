package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/gateway"
	"github.com/spillway-llm/spillway/profiles"
)

// BenchmarkGatewayOverhead sends a small non-stream chat request through
// the gateway (built-in config, the engine plus 99 other endpoints whose
// metrics make the engine the pick) and, for comparison, straight to the
// engine; "added-p50/p99-ms" is the difference of the percentiles.
func BenchmarkGatewayOverhead(b *testing.B) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":9,"completion_tokens":1}}`)
	}))
	defer engine.Close()
	addr := strings.TrimPrefix(engine.URL, "http://")
	st := discovery.NewStore()
	specs := []discovery.Spec{{Name: "engine", Address: addr}}
	for i := range 99 {
		specs = append(specs, discovery.Spec{Name: fmt.Sprintf("busy-%02d", i), Address: fmt.Sprintf("10.2.0.%d:8000", i)})
	}
	st.Update(specs)
	for _, e := range st.Endpoints() {
		if e.Address == addr {
			e.SetMetrics(&profiles.Metrics{})
		} else {
			e.SetMetrics(&profiles.Metrics{WaitingQueue: 50, KVUsage: 0.9})
		}
	}
	s, err := director.LoadScheduler("", profiles.Options{Endpoints: st})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	gw := httptest.NewServer(gateway.New(director.New(s, director.Options{}), gateway.Options{}))
	defer gw.Close()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello there"}]}`)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	do := func(url string) time.Duration {
		t0 := time.Now()
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(t0)
	}
	var via, direct []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		via = append(via, do(gw.URL))
		direct = append(direct, do(engine.URL))
	}
	p := func(d []time.Duration, q int) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, len(s)*q/100)].Microseconds()) / 1000
	}
	b.ReportMetric(p(via, 50), "gw-p50-ms")
	b.ReportMetric(p(direct, 50), "direct-p50-ms")
	b.ReportMetric(p(via, 50)-p(direct, 50), "added-p50-ms")
	b.ReportMetric(p(via, 99)-p(direct, 99), "added-p99-ms")
}
