package workloads

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Segment is a run of prompt tokens whose ids are a pure function of Key.
type Segment struct {
	Key uint64
	Len int
}

// Image is one image of a turn. Hash identifies its content: the same hash
// is the same image (and hits the encoder cache).
type Image struct {
	Width, Height int
	Hash          uint64
}

// Turn is one request of a conversation.
type Turn struct {
	Index int
	// Segments make up the prompt: the system prompt, then every earlier
	// turn's input and output, then this turn's input.
	Segments []Segment
	// SharedTokens is the length of the leading system prompt shared with
	// other conversations (0 when the system prompt is private).
	SharedTokens int
	NewInput     int // this turn's new user tokens
	Output       int // tokens the engine is asked to generate (ignore_eos)
	OutputKey    uint64
	MaxTokens    int
	Images       []Image
}

// PromptTokens is the text length of the prompt.
func (t *Turn) PromptTokens() int {
	n := 0
	for _, s := range t.Segments {
		n += s.Len
	}
	return n
}

// Conversation is a sequence of turns sharing a growing context.
type Conversation struct {
	ID     int
	Class  string
	SLO    SLO
	System int // system prompt index, -1 for a private one
	Turns  []Turn
}

// Session is one play of a conversation: open loop starts it at Start;
// closed loop plays sessions in order on the free clients.
type Session struct {
	Start time.Duration
	Conv  *Conversation
}

// Level is one load level's run.
type Level struct {
	Index       int
	Load        float64 // sessions per second (open) or concurrency (closed)
	Mode        string
	Concurrency int // closed loop clients; 0 for open loop
	Sessions    []Session
}

// Requests counts the turns the level issues.
func (l *Level) Requests() int {
	n := 0
	for _, s := range l.Sessions {
		n += len(s.Conv.Turns)
	}
	return n
}

// Plan is a spec expanded for one seed.
type Plan struct {
	Spec   *Spec
	Seed   uint64
	Levels []Level
}

// maxRequestsPerLevel bounds a plan so that a typo (levels: [1e6]) is an
// error rather than an out-of-memory.
const maxRequestsPerLevel = 200000

// Plan expands the spec for seed (0 = the spec's seed).
func (s *Spec) Plan(seed uint64) (*Plan, error) {
	if seed == 0 {
		seed = s.Seed
	}
	p := &Plan{Spec: s, Seed: seed}
	g := &gen{s: s, seed: seed}
	g.systemLens = make([]int, s.SystemPrompts.Count)
	sr := g.rng(1, 0)
	for i := range g.systemLens {
		g.systemLens[i] = s.SystemPrompts.Tokens.Sample(sr)
	}
	var shared []*Conversation
	if s.Conversations.Count > 0 {
		shared = g.corpus(s.Conversations.Count, 0)
	}
	for li, load := range s.Arrival.Levels {
		lv := Level{Index: li, Load: load, Mode: s.Arrival.Mode}
		r := g.rng(2, uint64(li))
		var n int // sessions (open) or conversations to build (closed)
		open := s.Arrival.Mode != ModeClosed
		if open {
			n = int(math.Round(load * s.Arrival.DurationSeconds))
		} else {
			lv.Concurrency = int(load)
			n = int(math.Ceil(load * s.Conversations.PerConcurrency))
		}
		n = max(n, 1)
		corpus := shared
		if corpus == nil {
			size := n
			if open {
				size = (n + s.Repeat - 1) / s.Repeat
			}
			corpus = g.corpus(size, li+1)
		}
		var order []*Conversation
		total := n
		if !open {
			total = len(corpus) * s.Repeat
			if s.Conversations.Count > 0 {
				total = n * s.Repeat
			}
		}
		switch s.Sampling {
		case "random":
			for range total {
				order = append(order, corpus[r.IntN(len(corpus))])
			}
		case "sequential":
			for len(order) < total {
				round := append([]*Conversation(nil), corpus...)
				r.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
				order = append(order, round[:min(len(round), total-len(order))]...)
			}
		}
		lv.Sessions = make([]Session, len(order))
		var starts []time.Duration
		if open {
			starts = g.arrivals(r, load, len(order))
		}
		for i, c := range order {
			lv.Sessions[i].Conv = c
			if open {
				lv.Sessions[i].Start = starts[i]
			}
		}
		if lv.Requests() > maxRequestsPerLevel {
			return nil, fmt.Errorf("workload %s: level %g issues %d requests, more than the limit %d", s.Name, load, lv.Requests(), maxRequestsPerLevel)
		}
		p.Levels = append(p.Levels, lv)
	}
	return p, nil
}

type gen struct {
	s          *Spec
	seed       uint64
	systemLens []int
}

// rng returns an independent deterministic stream per purpose.
func (g *gen) rng(purpose, index uint64) *rand.Rand {
	return rand.New(rand.NewPCG(g.seed^mix(purpose), mix(purpose<<32|index)))
}

func (g *gen) arrivals(r *rand.Rand, rate float64, n int) []time.Duration {
	out := make([]time.Duration, n)
	t := 0.0
	b := g.s.Arrival.Burst
	for i := range out {
		if g.s.Arrival.Mode == ModeBursty && b != nil {
			// Thinning: candidates at the peak rate, accepted with
			// rate(t)/peak.
			peak := rate * b.Factor
			low := rate * (1 - b.DutyCycle*b.Factor) / (1 - b.DutyCycle)
			for {
				t += r.ExpFloat64() / peak
				phase := math.Mod(t, b.PeriodSeconds) / b.PeriodSeconds
				cur := low
				if phase < b.DutyCycle {
					cur = peak
				}
				if r.Float64()*peak < cur {
					break
				}
			}
		} else {
			t += r.ExpFloat64() / rate
		}
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}

// corpus builds size conversations; space separates per-level corpora.
func (g *gen) corpus(size, space int) []*Conversation {
	s := g.s
	out := make([]*Conversation, size)
	for i := range out {
		r := g.rng(3, uint64(space)<<32|uint64(i))
		c := &Conversation{ID: i, SLO: s.SLO, System: -1}
		turns, in, outD := s.Conversations.Turns, s.Conversations.InputTokens, s.Conversations.OutputTokens
		if cl := g.pickClass(r); cl != nil {
			c.Class = cl.Name
			if cl.Turns != nil {
				turns = *cl.Turns
			}
			if cl.InputTokens != nil {
				in = *cl.InputTokens
			}
			if cl.OutputTokens != nil {
				outD = *cl.OutputTokens
			}
			if cl.SLO != nil {
				c.SLO = *cl.SLO
			}
		}
		var ctx []Segment
		shared := 0
		switch {
		case s.SystemPrompts.Count > 0:
			c.System = i % s.SystemPrompts.Count
			shared = g.systemLens[c.System]
			if shared > 0 {
				ctx = append(ctx, Segment{Key: mix(g.seed ^ mix(10) ^ uint64(c.System)), Len: shared})
			}
		default:
			if l := s.SystemPrompts.Tokens.Sample(r); l > 0 {
				ctx = append(ctx, Segment{Key: mix(g.seed ^ mix(11) ^ uint64(space)<<32 ^ uint64(i)), Len: l})
			}
		}
		nt := max(turns.Sample(r), 1)
		c.Turns = make([]Turn, nt)
		ctxLen := 0
		for _, sg := range ctx {
			ctxLen += sg.Len
		}
		for k := range c.Turns {
			t := &c.Turns[k]
			t.Index = k
			t.SharedTokens = shared
			t.NewInput = max(in.Sample(r), 1)
			t.Output = max(outD.Sample(r), 1)
			t.MaxTokens = s.Conversations.MaxTokens
			if t.MaxTokens > 0 {
				t.Output = min(t.Output, t.MaxTokens)
			}
			if lim := s.Conversations.MaxContextTokens; lim > 0 && k > 0 && ctxLen+t.NewInput+t.Output > lim {
				c.Turns = c.Turns[:k]
				break
			}
			ctxLen += t.NewInput + t.Output
			base := g.seed ^ mix(12) ^ uint64(space)<<40 ^ uint64(i)<<8 ^ uint64(k)
			ctx = append(ctx, Segment{Key: mix(base), Len: t.NewInput})
			t.Segments = append([]Segment(nil), ctx...)
			t.OutputKey = mix(base ^ 0xabcdef)
			ctx = append(ctx, Segment{Key: t.OutputKey, Len: t.Output})
			if im := s.Images(); im != nil {
				for range im.Count.Sample(r) {
					t.Images = append(t.Images, g.image(r.IntN(im.Pool)))
				}
			}
		}
		out[i] = c
	}
	return out
}

func (g *gen) pickClass(r *rand.Rand) *Class {
	cls := g.s.Classes
	if len(cls) == 0 {
		return nil
	}
	sum := 0.0
	for _, c := range cls {
		sum += weightOr1(c.Weight)
	}
	x := r.Float64() * sum
	for i := range cls {
		if x -= weightOr1(cls[i].Weight); x < 0 {
			return &cls[i]
		}
	}
	return &cls[len(cls)-1]
}

func weightOr1(w float64) float64 {
	if w == 0 {
		return 1
	}
	return w
}

// image returns pool image idx; its size is a function of idx so an image
// always has the same resolution.
func (g *gen) image(idx int) Image {
	im := g.s.Images()
	h := mix(g.seed ^ mix(13) ^ uint64(idx))
	sizes := im.Sizes
	sum := 0.0
	for _, s := range sizes {
		sum += weightOr1(s.Weight)
	}
	x := float64(h>>11) / float64(1<<53) * sum
	pick := sizes[len(sizes)-1]
	for _, s := range sizes {
		if x -= weightOr1(s.Weight); x < 0 {
			pick = s
			break
		}
	}
	return Image{Width: pick.Width, Height: pick.Height, Hash: h}
}

// mix is splitmix64's finaliser: a cheap, well-spread hash of x.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
