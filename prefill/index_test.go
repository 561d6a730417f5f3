package prefill_test

import (
	"math/rand/v2"
	"testing"

	"github.com/spillway-llm/spillway/prefill"
)

// TestIndexClosedMatchEqualsLinear feeds the same whole-prefix history to a
// prefix-closed index and a plain one under LRU pressure and checks that
// the binary-search match equals the block-by-block match.
func TestIndexClosedMatchEqualsLinear(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	closed, linear := prefill.NewIndex(200), prefill.NewIndex(200)
	closed.SetPrefixClosed(true)
	const neps, families = 6, 12
	chains := make([][]uint64, families)
	for f := range chains {
		toks := ids(uint32(f/3), 64*16) // families share prefixes in threes
		for i := 1024 / 2; i < len(toks); i++ {
			toks[i] += uint32(f) * 7919
		}
		chains[f] = prefill.ChainKeys(nil, 1, toks, 16, 0)
	}
	for step := range 3000 {
		f := rnd.IntN(families)
		n := 1 + rnd.IntN(len(chains[f]))
		e := rnd.IntN(neps)
		closed.Add(e, chains[f][:n], nil)
		linear.Add(e, chains[f][:n], nil)
		q := chains[rnd.IntN(families)]
		a, b := make([]int32, neps), make([]int32, neps)
		closed.Match(q, a)
		linear.Match(q, b)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("step %d: endpoint %d closed match %d, linear %d", step, i, a[i], b[i])
			}
		}
	}
}
