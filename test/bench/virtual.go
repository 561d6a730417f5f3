package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/test/sim"
	"github.com/spillway-llm/spillway/test/workloads"
)

// Routing headers the disaggregation handler sets (protocols.md).
const (
	headerPrefiller = "x-prefiller-host-port"
	headerEncoders  = "x-encoder-hosts-ports"
)

// record is one request's outcome, in virtual time since the epoch.
type record struct {
	level         int
	issued, first time.Duration
	finish        time.Duration
	prompt        int
	cached        int
	output        int
	failed        bool
	endpoint      string // destination (decode) endpoint
	prefill       string // prefill endpoint when disaggregated
	slo           workloads.SLO
}

// run is one configuration on one fresh fleet, playing one or more levels.
type run struct {
	cfg      *Config
	plan     *workloads.Plan
	fleet    *Fleet
	seed     uint64
	progress func(done, total int)

	vf       *sim.VirtualFleet
	eps      []*profiles.Endpoint
	engines  map[string]*sim.Engine // by address
	names    map[string]string      // address → name
	sched    *profiles.Scheduler
	reg      *prometheus.Registry
	imageTok func(w, h int) int

	records  []record
	pending  int // sessions not yet finished
	done     int
	total    int
	releases []float64 // saturation-release counter at each level's end
	nextID   int
}

// session is the state of one playing conversation.
type session struct {
	level  int
	conv   *workloads.Conversation
	turn   int
	ids    []uint32 // prompt ids of the last issued turn (text only)
	hashes []uint64
	segs   int
	onDone func()
}

func newRun(cfg *Config, plan *workloads.Plan, fleet *Fleet, seed uint64) (*run, error) {
	r := &run{cfg: cfg, plan: plan, fleet: fleet, seed: seed, engines: map[string]*sim.Engine{}, names: map[string]string{}, imageTok: qwen3VLTokens}
	specs := fleet.Specs()
	r.vf = sim.NewVirtualFleet(time.Time{}, specs)
	for i, e := range r.vf.Endpoints {
		addr := r.vf.Address(e)
		role := string(e.Role)
		ep := profiles.NewEndpoint(i, e.Name, addr, map[string]string{profiles.RoleLabel: role})
		r.eps = append(r.eps, ep)
		r.engines[addr] = e
		r.names[addr] = e.Name
	}
	r.reg = prometheus.NewRegistry()
	s, err := profiles.LoadConfigBytes(cfg.File, cfg.Data, profiles.Options{
		Endpoints: profiles.EndpointList(r.eps), Clock: r.vf.Loop, Registerer: r.reg,
	})
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w", cfg.Name, err)
	}
	r.sched = s
	for i, p := range s.Plugins() {
		if sd, ok := p.(profiles.Seeder); ok {
			sd.Seed(seed*1_000_003 + uint64(i))
		}
	}
	for _, ep := range r.eps {
		s.OnEndpointAdded(ep)
	}
	r.scrape()
	return r, nil
}

func (r *run) close() { r.sched.Close() }

// scrape publishes every engine's live state as the picker's metrics, the
// way the scraper would, and reschedules itself while work remains.
func (r *run) scrape() {
	now := r.vf.Now()
	for i, e := range r.vf.Endpoints {
		s := e.Snapshot()
		r.eps[i].SetMetrics(&profiles.Metrics{
			WaitingQueue: s.Waiting, Running: s.Running, KVUsage: s.KVUsage,
			BlockSize: s.BlockSize, NumGPUBlocks: s.NumGPUBlocks,
			PrefixQueries: float64(s.PrefixQueries), PrefixHits: float64(s.PrefixHits),
			UpdatedAt: now,
		})
	}
	if r.pending > 0 {
		r.vf.After(time.Duration(r.fleet.ScrapeIntervalMs)*time.Millisecond, r.scrape)
	}
}

// playLevels runs the levels: back to back on this fleet when the
// workload ramps, else the single level given.
func (r *run) playLevels(ctx context.Context, levels []int) error {
	spec := r.plan.Spec
	offset := time.Duration(0)
	for _, li := range levels {
		r.total += r.plan.Levels[li].Requests()
	}
	for _, li := range levels {
		lv := &r.plan.Levels[li]
		r.pending += len(lv.Sessions)
		if lv.Mode == workloads.ModeClosed {
			r.closedLoop(li, lv)
		} else {
			for i := range lv.Sessions {
				ss := &lv.Sessions[i]
				r.vf.At(r.vf.Epoch().Add(offset+ss.Start), func() { r.start(li, ss.Conv, nil) })
			}
		}
		if spec.Arrival.Ramp {
			offset += time.Duration(spec.Arrival.DurationSeconds * float64(time.Second))
			r.vf.At(r.vf.Epoch().Add(offset), func() { r.releases = append(r.releases, r.releaseCount()) })
		}
	}
	r.vf.After(0, r.scrape)
	for n := 0; r.vf.Step(); n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if !spec.Arrival.Ramp {
		r.releases = append(r.releases, r.releaseCount())
	}
	for len(r.releases) < len(levels) {
		r.releases = append(r.releases, r.releaseCount())
	}
	return nil
}

func (r *run) closedLoop(li int, lv *workloads.Level) {
	next := 0
	var client func()
	client = func() {
		if next >= len(lv.Sessions) {
			return
		}
		c := lv.Sessions[next].Conv
		next++
		r.start(li, c, client)
	}
	for range max(lv.Concurrency, 1) {
		r.vf.After(0, client)
	}
}

func (r *run) start(li int, c *workloads.Conversation, onDone func()) {
	s := &session{level: li, conv: c, onDone: onDone}
	r.issue(s)
}

func (r *run) finishSession(s *session) {
	r.pending--
	if s.onDone != nil {
		s.onDone()
	}
}

// issue schedules and submits the session's current turn.
func (r *run) issue(s *session) {
	t := &s.conv.Turns[s.turn]
	for _, sg := range t.Segments[s.segs:] {
		s.ids = sg.AppendIDs(s.ids)
	}
	s.segs = len(t.Segments)
	prompt := s.ids
	imgTok := 0
	var imgTokens [][]uint32
	if len(t.Images) > 0 {
		prompt = append([]uint32(nil), s.ids...)
		for _, im := range t.Images {
			n := r.imageTok(im.Width, im.Height)
			imgTok += n
			tok := sim.AppendImage(nil, "img:"+strconv.FormatUint(im.Hash, 16), n)
			imgTokens = append(imgTokens, tok)
			prompt = append(prompt, tok...)
		}
	}
	r.nextID++
	id := "req-" + strconv.Itoa(r.nextID)
	req := &profiles.Request{
		ID: id, Path: profiles.PathChatCompletions, Headers: map[string]string{"x-request-id": id},
		Model: r.plan.Spec.Model, Stream: true, IncludeUsage: true, MaxTokens: t.MaxTokens,
		Tokens: profiles.TokenCounts{Text: len(s.ids), Image: imgTok, Weighted: float64(len(prompt)), IDs: prompt, Counted: true, Backend: "bench"},
	}
	for _, im := range t.Images {
		url := "bench:image/" + strconv.FormatUint(im.Hash, 16)
		req.Multimodal = append(req.Multimodal, profiles.MultimodalItem{Kind: profiles.KindImage, URL: url, Message: 0})
		req.Tokens.Images = append(req.Tokens.Images, profiles.ImageTokens{Width: im.Width, Height: im.Height, Tokens: r.imageTok(im.Width, im.Height), Hash: im.Hash})
	}
	issued := r.vf.Elapsed()
	rec := record{level: s.level, issued: issued, prompt: len(prompt), slo: s.conv.SLO}
	res, err := r.sched.Schedule(context.Background(), req)
	if err != nil || len(res.Destination()) == 0 {
		rec.failed, rec.finish = true, issued
		r.complete(s, rec, false)
		return
	}
	dest := res.Destination()[0]
	decode := r.engines[dest.Address]
	rec.endpoint = dest.Name
	tr := r.sched.Dispatch(req, res)

	bs := decode.Prof.BlockSize
	var hashes []uint64
	if len(imgTokens) == 0 { // hashes extend turn by turn; images break the chain
		s.hashes = sim.AppendBlockHashes(s.hashes, s.ids, bs)
		hashes = s.hashes
	}
	sr := &sim.Request{ID: id, Prompt: prompt, BlockHashes: hashes, MaxTokens: t.Output}
	sr.OnFirstToken = func(_ *sim.Request, at time.Time) {
		rec.first = at.Sub(r.vf.Epoch())
		tr.FirstChunk()
	}
	sr.OnComplete = func(_ *sim.Request, out sim.Result) {
		rec.finish = out.Finish.Sub(r.vf.Epoch())
		if out.Err != nil {
			rec.failed = true
			tr.Fail(out.Err)
			r.complete(s, rec, false)
			return
		}
		rec.cached, rec.output = out.CachedTokens, out.CompletionTokens
		tr.Finish(profiles.Usage{PromptTokens: out.PromptTokens, CompletionTokens: out.CompletionTokens, CachedTokens: out.CachedTokens, Reported: true, TTFT: out.TTFT()})
		r.complete(s, rec, true)
	}
	prefill := decode
	if a := res.Headers[headerPrefiller]; a != "" && a != dest.Address {
		if e := r.engines[a]; e != nil {
			prefill = e
			rec.prefill = e.Name
		}
	}
	submit := func() {
		if prefill != decode {
			r.vf.SubmitPD(prefill, decode, sr, func(sim.Result) { tr.PrefillDone() })
			return
		}
		decode.Submit(sr)
	}
	encs := splitHosts(res.Headers[headerEncoders])
	if len(encs) == 0 || len(imgTokens) == 0 {
		submit()
		return
	}
	// Encoder legs first: one per image, spread over the chosen encoders;
	// prefill starts when the last embedding is back.
	left := len(imgTokens)
	for i, tok := range imgTokens {
		enc := r.engines[encs[i%len(encs)]]
		if enc == nil {
			enc = decode
		}
		enc.Submit(&sim.Request{ID: fmt.Sprintf("%s/enc%d", id, i), Prompt: tok, MaxTokens: 1, OnComplete: func(*sim.Request, sim.Result) {
			if left--; left == 0 {
				submit()
			}
		}})
	}
}

func (r *run) complete(s *session, rec record, ok bool) {
	r.records = append(r.records, rec)
	r.done++
	if r.progress != nil {
		r.progress(r.done, r.total)
	}
	if ok && s.turn+1 < len(s.conv.Turns) {
		s.turn++
		r.issue(s)
		return
	}
	// a failed turn ends the conversation: its later turns would need
	// the missing output
	r.done += len(s.conv.Turns) - s.turn - 1
	r.finishSession(s)
}

func splitHosts(v string) []string {
	if v == "" {
		return nil
	}
	var out []string
	for _, h := range strings.Split(v, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// qwen3VLTokens is Qwen3-VL's image token count: the image resized to
// multiples of 32 (round half to even) and one token per 32×32 patch
// (multimodal.md; clamps ignored, the shipped sizes are within them).
func qwen3VLTokens(w, h int) int {
	r := func(x int) int {
		q, rem := x/32, x%32
		if rem > 16 || (rem == 16 && q%2 == 1) {
			q++
		}
		return max(q, 1)
	}
	return r(w) * r(h)
}
