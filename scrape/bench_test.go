package scrape

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

// The benchmarks serve the 100 fake engines from a child process (this test
// binary re-executed) so that CPU and allocation figures are the scraper's
// alone, not the HTTP servers'.
const serveEnv = "SPILLWAY_SCRAPE_BENCH_SERVE"

func TestMain(m *testing.M) {
	if n := os.Getenv(serveEnv); n != "" {
		serveChild(n)
		return
	}
	os.Exit(m.Run())
}

// serveChild listens on n loopback ports serving testdata/vllm.txt, prints
// the addresses, and exits when its stdin closes.
func serveChild(nStr string) {
	n, _ := strconv.Atoi(nStr)
	body, err := os.ReadFile("testdata/vllm.txt")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	clen := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Content-Length", clen)
		w.Write(body)
	})
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go http.Serve(ln, h)
		fmt.Println(ln.Addr().String())
	}
	io.Copy(io.Discard, os.Stdin)
}

// childEngines starts n engines in a child process and returns a store
// holding them.
func childEngines(b *testing.B, n int) *discovery.Store {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	sc := bufio.NewScanner(stdout)
	specs := make([]discovery.Spec, 0, n)
	for i := 0; i < n && sc.Scan(); i++ {
		specs = append(specs, discovery.Spec{Name: fmt.Sprintf("ep-%03d", i), Address: sc.Text()})
	}
	if len(specs) != n {
		b.Fatalf("child started %d of %d engines", len(specs), n)
	}
	store := discovery.NewStore()
	store.Update(specs)
	return store
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// BenchmarkParseVLLM: parsing and mapping one ~150-line vLLM exposition.
func BenchmarkParseVLLM(b *testing.B) {
	body, err := os.ReadFile("testdata/vllm.txt")
	if err != nil {
		b.Fatal(err)
	}
	s := New(discovery.NewStore(), Options{Logger: quietLog()})
	t := s.newTarget(context.Background(), profiles.NewEndpoint(0, "x", "127.0.0.1:1", nil))
	defer t.cancel()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		t.buf.Reset()
		t.buf.Write(body)
		fams, err := t.parse("")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := toMetrics(fams, time.Now(), time.Time{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScrapeRound100: one op = every one of 100 endpoints fetched over
// loopback HTTP (keep-alive), parsed and published, one after the other.
func BenchmarkScrapeRound100(b *testing.B) {
	store := childEngines(b, 100)
	s := New(store, Options{Logger: quietLog(), Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var targets []*target
	for _, ep := range store.Endpoints() {
		targets = append(targets, s.newTarget(ctx, ep))
	}
	round := func() {
		for _, t := range targets {
			m, err := t.scrape(time.Now())
			if err != nil {
				b.Fatal(err)
			}
			t.publish(m, nil)
		}
	}
	round() // warm the connections
	b.ReportAllocs()
	for b.Loop() {
		round()
	}
}

// BenchmarkScraperCPU100: the real Scraper over 100 endpoints at the default
// 50ms interval for 2 s of wall time; reports the scraper process's CPU per
// wall second (user+sys) and the scrape rate achieved.
func BenchmarkScraperCPU100(b *testing.B) {
	store := childEngines(b, 100)
	const wall = 2 * time.Second
	for b.Loop() {
		reg := prometheus.NewRegistry()
		s := New(store, Options{Logger: quietLog(), Registerer: reg})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		// Let connections warm up before measuring.
		go func() { done <- s.Run(ctx) }()
		time.Sleep(200 * time.Millisecond)
		n0 := scrapes(s)
		u0 := cpu()
		t0 := time.Now()
		time.Sleep(wall)
		used := cpu() - u0
		el := time.Since(t0)
		n := scrapes(s) - n0
		cancel()
		<-done
		b.ReportMetric(float64(used.Microseconds())/1000/el.Seconds(), "cpu-ms/s")
		b.ReportMetric(float64(n)/el.Seconds(), "scrapes/s")
		if n > 0 {
			b.ReportMetric(float64(used.Microseconds())/float64(n), "cpu-µs/scrape")
		}
	}
}

func scrapes(s *Scraper) uint64 {
	ch := make(chan prometheus.Metric, 1)
	s.m.duration.Collect(ch)
	var out uint64
	m := <-ch
	pb := &dto.Metric{}
	_ = m.Write(pb)
	out = pb.GetHistogram().GetSampleCount()
	return out
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
