package prefill_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// go test -bench . -benchmem -run '^$' ./prefill

// cpuTime is the process's user+system CPU time. Benchmarks report it per
// op as cpu-ns/op next to the wall-clock ns/op: on a shared machine the
// wall clock includes time spent waiting for a core, the CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func BenchmarkHash(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000, 100000} {
		toks := ids(1, n)
		dst := make([]uint64, 0, n/16)
		b.Run(fmt.Sprintf("tokens=%dk", n/1000), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			b.ReportAllocs()
			c0 := cpuTime()
			for b.Loop() {
				dst = prefill.ChainKeys(dst[:0], 42, toks, 16, 0)
			}
			reportCPU(b, c0)
		})
	}
}

const pickConfig = `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: approx-prefix-cache-producer
- type: inflight-load-producer
- type: prefix-cache-affinity-filter
  name: affinity
- type: token-load-scorer
- type: max-score-picker
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: affinity}, {pluginRef: token-load-scorer}, {pluginRef: max-score-picker}]
`

// BenchmarkPrefillPick schedules one request through the prefill profile:
// hashing the prompt, matching it on every endpoint, the affinity filter,
// the token-load scorer and the picker. 32 prompt families are warm, each
// on two endpoints, with in-flight load on every endpoint; each request is
// a warm family's prompt (its last 10% new).
func BenchmarkPrefillPick(b *testing.B) {
	for _, n := range []int{8, 64, 256} {
		for _, plen := range []int{8192, 100000} {
			b.Run(fmt.Sprintf("endpoints=%d/prompt=%dk", n, plen/1000), func(b *testing.B) {
				eps := endpoints(n)
				s, err := profiles.LoadConfigBytes("bench.yaml", []byte(pickConfig), profiles.Options{Endpoints: profiles.EndpointList(eps)})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				const families = 32
				prompts := make([][]uint32, families)
				for f := range prompts {
					prompts[f] = ids(uint32(f+1), plen)
					warm := request("m", prompts[f][:plen*9/10])
					if _, err := s.Schedule(ctx, warm); err != nil {
						b.Fatal(err)
					}
					for _, e := range []*profiles.Endpoint{eps[f%n], eps[(f*7+3)%n]} {
						s.Dispatch(warm, result("prefill", e)).Finish(profiles.Usage{})
					}
				}
				for i, e := range eps {
					s.Dispatch(tokensOnly(1000*(i%13)), result("prefill", e)) // held for the run
				}
				reqs := make([]*profiles.Request, 0, 1024)
				b.ReportAllocs()
				i := 0
				c0 := cpuTime()
				for b.Loop() {
					req := &profiles.Request{ID: "b", Model: "m", Tokens: profiles.TokenCounts{Text: plen, Weighted: float64(plen), IDs: prompts[i%families], Counted: true}}
					if _, err := s.Schedule(ctx, req); err != nil {
						b.Fatal(err)
					}
					if len(reqs) < cap(reqs) {
						reqs = append(reqs, req)
					}
					i++
				}
				b.StopTimer()
				reportCPU(b, c0)
				sticky := 0
				for _, r := range reqs {
					if mb, tb, _ := prefill.MatchOf(r, eps[0]); tb > 0 && mb > 0 {
						sticky++
					}
				}
				_ = sticky
			})
		}
	}
}

// BenchmarkIndexMemory measures the heap one million indexed blocks take
// (64 endpoints × 15625 blocks, every key distinct).
func BenchmarkIndexMemory(b *testing.B) {
	const perEp, neps = 15625, 64
	keys := make([]uint64, perEp)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		x := prefill.NewIndex(31250)
		for e := range neps {
			for i := range keys {
				keys[i] = uint64(e)<<32 | uint64(i)
			}
			x.Add(e, keys, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if x.Blocks() != perEp*neps {
			b.Fatalf("%d blocks", x.Blocks())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(perEp*neps), "bytes/block")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB/Mblocks")
		runtime.KeepAlive(x)
	}
}
