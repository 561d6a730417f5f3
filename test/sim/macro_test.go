package sim

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Macro-stepping must not change any result: run the same random trace with
// and without it and compare every request's times exactly (±1 ns rounding).
func TestMacroSteppingIsExact(t *testing.T) {
	run := func(macro bool) []Result {
		p := MustProfile(DefaultProfileName)
		p.NumGPUBlocks = 3000
		f := NewVirtualFleet(time.Time{}, []EndpointSpec{{Profile: p}, {Profile: p}})
		for _, e := range f.Endpoints {
			e.macroOK = macro
		}
		rng := rand.New(rand.NewPCG(5, 6))
		shared := synth(1, 4000)
		res := make([]Result, 300)
		at := time.Duration(0)
		for i := range res {
			at += time.Duration(rng.ExpFloat64() * float64(150*time.Millisecond))
			n := 200 + rng.IntN(6000)
			prompt := synth(uint64(1000+i), n)
			if i%3 == 0 {
				prompt = append(append([]uint32{}, shared...), prompt[:n/4]...)
			}
			out := 1 + rng.IntN(300)
			e := f.Endpoints[i%2]
			f.At(f.Epoch().Add(at), func() {
				e.Submit(&Request{Prompt: prompt, MaxTokens: out, OnComplete: func(_ *Request, r Result) { res[i] = r }})
			})
		}
		f.Run()
		return res
	}
	a, b := run(true), run(false)
	for i := range a {
		if a[i].Err != nil || b[i].Err != nil {
			t.Fatal(a[i].Err, b[i].Err)
		}
		d1 := a[i].FirstToken.Sub(b[i].FirstToken)
		d2 := a[i].Finish.Sub(b[i].Finish)
		if d1 < -time.Microsecond || d1 > time.Microsecond || d2 < -time.Microsecond || d2 > time.Microsecond || a[i].CachedTokens != b[i].CachedTokens {
			t.Fatalf("req %d differs: macro %+v\nplain %+v", i, a[i], b[i])
		}
	}
}

func TestEvictionPublishesBlockRemoved(t *testing.T) {
	p := MustProfile(DefaultProfileName)
	p.NumGPUBlocks = 40
	f := NewVirtualFleet(time.Time{}, []EndpointSpec{{Profile: p}})
	e := f.Endpoints[0]
	var got []KVEvent
	e.SetEventSink(func(_ string, b EventBatch) { got = append(got, b.Events...) })
	a := synth(70, 320) // 20 blocks
	runOne(t, f, e, a, 1)
	runOne(t, f, e, synth(71, 500), 1) // 32 blocks: evicts 12+ of a's
	stored, removed := 0, 0
	for _, ev := range got {
		switch ev.Type {
		case "BlockStored":
			stored += len(ev.BlockHashes)
			if len(ev.TokenIDs) != 16*len(ev.BlockHashes) || ev.BlockSize != 16 {
				t.Fatalf("%+v", ev)
			}
		case "BlockRemoved":
			removed += len(ev.BlockHashes)
		}
	}
	if stored != 20+31 || removed < 11 {
		t.Fatalf("stored %d removed %d", stored, removed)
	}
	if got[0].ParentBlockHash != nil || got[0].BlockHashes[0] != BlockHashes(a, 16)[0] {
		t.Fatalf("first event %+v", got[0])
	}
	// the removed hashes are a's tail blocks
	want := BlockHashes(a, 16)
	for _, ev := range got {
		if ev.Type == "BlockRemoved" && ev.BlockHashes[len(ev.BlockHashes)-1] != want[19] {
			t.Fatalf("eviction should start from a's tail")
		}
	}
}
