package sim

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// codeGenConv is one conversation of the seed's code-generation shape:
// system prompt 3k–100k tokens (mean ~55k), 2–20 turns (mean 6), 100–10000
// input tokens per turn (mean 1500), 50–4000 output tokens (mean 800).
type codeGenConv struct {
	turns  int
	inLen  []int // prompt length of each turn (grows: history + new input)
	outLen []int
	hashes []uint64 // block hashes of the longest prompt (unique per conversation)
}

func clampN(x, lo, hi float64) int {
	if x < lo {
		x = lo
	}
	if x > hi {
		x = hi
	}
	return int(x)
}

func newCodeGenConv(rng *rand.Rand, id uint64) codeGenConv {
	sys := clampN(rng.ExpFloat64()*55000, 3000, 100000)
	c := codeGenConv{turns: clampN(rng.ExpFloat64()*6, 2, 20)}
	ctx := sys
	for t := 0; t < c.turns; t++ {
		ctx += clampN(rng.ExpFloat64()*1500, 100, 10000)
		if ctx+4000 > 131072 {
			c.turns = t
			break
		}
		out := clampN(rng.ExpFloat64()*800, 50, 4000)
		c.inLen = append(c.inLen, ctx)
		c.outLen = append(c.outLen, out)
		ctx += out
	}
	if c.turns == 0 {
		c.turns, c.inLen, c.outLen = 1, []int{sys}, []int{800}
	}
	n := c.inLen[c.turns-1] / 16
	c.hashes = make([]uint64, n)
	for i := range c.hashes {
		c.hashes[i] = mix64(id<<32 | uint64(i))
	}
	return c
}

// BenchmarkVirtualFleetCodeGen measures simulated requests per wall second
// for a 10-endpoint qwen3-32b-h100 fleet under closed-loop code-generation
// traffic (6 concurrent conversations per endpoint, sticky routing).
func BenchmarkVirtualFleetCodeGen(b *testing.B) {
	const endpoints, concurrency = 10, 60
	specs := make([]EndpointSpec, endpoints)
	f := NewVirtualFleet(time.Time{}, specs)
	prompt := synth(99, 200000) // shared token buffer: the engine keys on BlockHashes
	rng := rand.New(rand.NewPCG(1, 2))
	done := 0
	var ttftSum time.Duration
	var nextID uint64
	preempt := 0
	var startConv func()
	var runTurn func(c *codeGenConv, e *Engine, t int)
	runTurn = func(c *codeGenConv, e *Engine, t int) {
		n := c.inLen[t]
		e.Submit(&Request{
			Prompt: prompt[:n], BlockHashes: c.hashes[:n/16], MaxTokens: c.outLen[t],
			OnComplete: func(_ *Request, res Result) {
				done++
				if res.Err != nil {
					b.Fatal(res.Err)
				}
				ttftSum += res.TTFT()
				preempt += res.Preemptions
				if t+1 < c.turns {
					runTurn(c, e, t+1)
				} else if done < b.N {
					startConv()
				}
			},
		})
	}
	startConv = func() {
		nextID++
		c := newCodeGenConv(rng, nextID)
		runTurn(&c, f.Endpoints[nextID%endpoints], 0)
	}
	cpu0 := cpuSeconds()
	b.ResetTimer()
	for i := 0; i < concurrency; i++ {
		startConv()
	}
	for done < b.N && f.Step() {
	}
	b.StopTimer()
	el := b.Elapsed().Seconds()
	b.ReportMetric(float64(done)/el, "sim-req/s")
	// CPU-time rate: robust to a loaded machine (wall rate on an idle core)
	b.ReportMetric(float64(done)/(cpuSeconds()-cpu0), "sim-req/cpu-s")
	b.ReportMetric(f.Elapsed().Seconds()/el, "virtual-s/wall-s")
	b.ReportMetric(float64(preempt)/float64(done), "preempt/req")
	if done > 0 {
		b.ReportMetric(ttftSum.Seconds()/float64(done), "mean-TTFT-s")
	}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
