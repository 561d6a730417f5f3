package workloads

import (
	"reflect"
	"strings"
	"testing"
)

func TestShippedSpecsParseAndPlan(t *testing.T) {
	names := Names()
	for _, want := range []string{"code-generation", "reasoning", "b2b-saas", "multimodal", "mixed-bursty"} {
		found, quick := false, false
		for _, n := range names {
			found = found || n == want
			quick = quick || n == want+"-quick"
		}
		if !found || !quick {
			t.Errorf("workload %s (and its -quick variant) not shipped; have %v", want, names)
		}
	}
	for _, n := range names {
		if !strings.HasSuffix(n, "-quick") {
			continue // full plans are large; their parse is checked below
		}
		s, err := Load(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		p, err := s.Plan(0)
		if err != nil {
			t.Fatalf("%s: plan: %v", n, err)
		}
		if len(p.Levels) != len(s.Arrival.Levels) {
			t.Fatalf("%s: %d levels, want %d", n, len(p.Levels), len(s.Arrival.Levels))
		}
		for _, lv := range p.Levels {
			if lv.Requests() == 0 {
				t.Errorf("%s level %g: no requests", n, lv.Load)
			}
		}
	}
	for _, n := range names {
		if _, err := Load(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

func TestPlanIsDeterministicPerSeed(t *testing.T) {
	s, err := Load("b2b-saas-quick")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Plan(5)
	b, _ := s.Plan(5)
	c, _ := s.Plan(6)
	if !reflect.DeepEqual(a.Levels, b.Levels) {
		t.Fatal("same seed gave different plans")
	}
	if reflect.DeepEqual(a.Levels, c.Levels) {
		t.Fatal("different seeds gave identical plans")
	}
}

func TestSharedPrefixesShareTokens(t *testing.T) {
	s, _ := Load("b2b-saas-quick")
	p, _ := s.Plan(0)
	bySys := map[int][]uint32{}
	for _, ss := range p.Levels[0].Sessions {
		tr := ss.Conv.Turns[0]
		if tr.PromptTokens() != 7200 || tr.SharedTokens != 6000 {
			t.Fatalf("prompt %d tokens (shared %d), want 7200 (6000)", tr.PromptTokens(), tr.SharedTokens)
		}
		ids := tr.IDs()[:6000]
		if prev, ok := bySys[ss.Conv.System]; ok && !reflect.DeepEqual(prev, ids) {
			t.Fatal("two requests with one system prompt have different prefix tokens")
		}
		bySys[ss.Conv.System] = ids
	}
	if len(bySys) < 2 {
		t.Fatal("expected several system prompts")
	}
	var first []uint32
	for _, ids := range bySys {
		if first != nil && reflect.DeepEqual(first[:64], ids[:64]) {
			t.Fatal("different system prompts start with the same tokens")
		}
		first = ids
	}
}

func TestConversationContextGrows(t *testing.T) {
	s, _ := Load("code-generation-quick")
	p, _ := s.Plan(0)
	for _, ss := range p.Levels[0].Sessions {
		c := ss.Conv
		for k := 1; k < len(c.Turns); k++ {
			prev, cur := c.Turns[k-1], c.Turns[k]
			if cur.PromptTokens() != prev.PromptTokens()+prev.Output+cur.NewInput {
				t.Fatalf("turn %d: prompt %d, want previous prompt %d + output %d + input %d", k, cur.PromptTokens(), prev.PromptTokens(), prev.Output, cur.NewInput)
			}
			pi, ci := prev.IDs(), cur.IDs()
			if !reflect.DeepEqual(pi, ci[:len(pi)]) {
				t.Fatalf("turn %d does not extend turn %d's prompt", k, k-1)
			}
		}
		if last := c.Turns[len(c.Turns)-1]; last.PromptTokens()+last.Output > s.Conversations.MaxContextTokens && len(c.Turns) > 1 {
			t.Fatalf("conversation exceeds maxContextTokens")
		}
	}
}

func TestClosedLoopRepeatsConversations(t *testing.T) {
	s, _ := Load("reasoning-quick")
	p, _ := s.Plan(0)
	lv := p.Levels[0]
	if lv.Concurrency != 16 || len(lv.Sessions) != 48 {
		t.Fatalf("concurrency %d sessions %d, want 16 and 48", lv.Concurrency, len(lv.Sessions))
	}
	count := map[*Conversation]int{}
	for _, ss := range lv.Sessions {
		count[ss.Conv]++
	}
	for _, n := range count {
		if n != 3 {
			t.Fatalf("a conversation was issued %d times, want 3", n)
		}
	}
}

func TestBurstyArrivalsKeepMeanRate(t *testing.T) {
	s, _ := Load("mixed-bursty-quick")
	p, _ := s.Plan(0)
	lv := p.Levels[len(p.Levels)-1]
	last := lv.Sessions[len(lv.Sessions)-1].Start.Seconds()
	rate := float64(len(lv.Sessions)) / last
	if rate < lv.Load*0.6 || rate > lv.Load*1.6 {
		t.Fatalf("mean rate %.2f, want about %g", rate, lv.Load)
	}
	classes := map[string]bool{}
	for _, ss := range lv.Sessions {
		classes[ss.Conv.Class] = true
	}
	if len(classes) != 3 {
		t.Fatalf("classes %v, want 3", classes)
	}
}

func TestImagesAreStablePerPoolEntry(t *testing.T) {
	s, _ := Load("multimodal-quick")
	p, _ := s.Plan(0)
	size := map[uint64]Image{}
	n := 0
	for _, ss := range p.Levels[0].Sessions {
		for _, im := range ss.Conv.Turns[0].Images {
			n++
			if prev, ok := size[im.Hash]; ok && prev != im {
				t.Fatal("one image hash with two sizes")
			}
			size[im.Hash] = im
		}
	}
	if n == 0 {
		t.Fatal("no images generated")
	}
}

func TestBadSpecsAreClearErrors(t *testing.T) {
	base := `name: x
conversations: {inputTokens: {value: 10}, outputTokens: {value: 10}}
arrival: {mode: poisson, levels: [1], durationSeconds: 1}
slo: {ttftMs: 1000}
`
	if _, err := Parse("ok.yaml", []byte(base)); err != nil {
		t.Fatalf("base spec: %v", err)
	}
	cases := map[string]string{
		"unknown field":     base + "bogus: 1\n",
		"bad mode":          strings.Replace(base, "poisson", "steady", 1),
		"decreasing levels": strings.Replace(base, "[1]", "[2, 1]", 1),
		"no duration":       strings.Replace(base, ", durationSeconds: 1", "", 1),
		"bad dist":          strings.Replace(base, "{value: 10}, outputTokens", "{min: 5, max: 2}, outputTokens", 1),
		"bad name":          strings.Replace(base, "name: x", "name: X Y", 1),
		"not yaml":          "::: [",
		"too many":          strings.Replace(base, "[1]", "[1000000]", 1),
	}
	for name, doc := range cases {
		s, err := Parse(name, []byte(doc))
		if err == nil {
			_, err = s.Plan(0)
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Load("no-such-workload"); err == nil || !strings.Contains(err.Error(), "b2b-saas") {
		t.Errorf("unknown workload error should list shipped ones: %v", err)
	}
}
