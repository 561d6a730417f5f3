package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/gateway"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/spillway-llm/spillway/test/sim"
	"github.com/spillway-llm/spillway/test/workloads"
)

// RealOptions configure a real-HTTP run: simulator endpoints on loopback,
// a kvtransfer sidecar in front of every decode endpoint of a disaggregated
// fleet, the picker's director and gateway in front of them, a load
// generator speaking the OpenAI API to the gateway.
type RealOptions struct {
	// TimeScale speeds the simulators up (simulated seconds per wall
	// second); arrival times are scaled to match and every measured
	// duration is reported in simulated time. Default 4.
	TimeScale float64
	// ScrapeInterval of engine metrics, wall time (default 25 ms).
	ScrapeInterval time.Duration
	// RequestTimeout bounds one request, wall time (default 120 s).
	RequestTimeout time.Duration
}

// staticSource hands the store a fixed endpoint set.
type staticSource []discovery.Spec

func (s staticSource) Run(ctx context.Context, sink discovery.Sink) error {
	sink.Update(s)
	<-ctx.Done()
	return nil
}

// realFleet is one cold fleet and picker stack for one configuration.
type realFleet struct {
	servers  []*sim.Server
	sidecars []*http.Server
	scs      []*kvtransfer.Sidecar
	stack    *director.Stack
	gw       *http.Server
	url      string
	cancel   context.CancelFunc
	runDone  chan error
	client   *http.Client
	dir      string
}

func startRealFleet(ctx context.Context, cfg *Config, fleet *Fleet, model string, o RealOptions) (_ *realFleet, err error) {
	rf := &realFleet{runDone: make(chan error, 1)}
	defer func() {
		if err != nil {
			rf.close()
		}
	}()
	var specs []discovery.Spec
	for _, es := range fleet.Specs() {
		s, err := sim.NewServer(sim.ServerConfig{Name: es.Name, Model: model, Role: es.Role, Profile: es.Profile, TimeScale: o.TimeScale})
		if err != nil {
			return nil, fmt.Errorf("starting simulator %s: %w", es.Name, err)
		}
		rf.servers = append(rf.servers, s)
		specs = append(specs, discovery.Spec{Name: es.Name, Address: s.Addr(), Labels: map[string]string{profiles.RoleLabel: string(es.Role)}})
	}
	if fleet.Disaggregated() {
		// Every decode pod gets the sidecar in front: the picker routes to
		// the sidecar, which runs the encoder and prefill legs named in the
		// routing headers and then decodes on its own simulator.
		var legs []string
		for _, sp := range specs {
			if r := sp.Labels[profiles.RoleLabel]; r == string(sim.RolePrefill) || r == string(sim.RoleEncode) {
				legs = append(legs, sp.Address)
			}
		}
		for i := range specs {
			if r := specs[i].Labels[profiles.RoleLabel]; r != string(sim.RoleDecode) && r != string(sim.RoleBoth) {
				continue
			}
			addr, err := rf.startSidecar("http://"+specs[i].Address, legs)
			if err != nil {
				return nil, fmt.Errorf("starting the sidecar of %s: %w", specs[i].Name, err)
			}
			specs[i].Address = addr
		}
	}
	rf.dir, err = os.MkdirTemp("", "spillway-bench-")
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(rf.dir, cfg.Name+".yaml")
	if err := os.WriteFile(cfgPath, cfg.Data, 0o644); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	rf.cancel = cancel
	log := slog.New(slog.DiscardHandler)
	st, err := director.NewStack(sctx, director.StackOptions{ConfigPath: cfgPath, Source: staticSource(specs), ScrapeInterval: o.ScrapeInterval, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %s", cfg.Name, strings.ReplaceAll(err.Error(), cfgPath, cfg.File))
	}
	rf.stack = st
	go func() { rf.runDone <- st.Run(sctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := st.Store.WaitSynced(wctx); err != nil {
		return nil, fmt.Errorf("waiting for endpoints: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rf.gw = &http.Server{Handler: gateway.New(st.Director, gateway.Options{Logger: log}), ReadHeaderTimeout: 10 * time.Second}
	go rf.gw.Serve(ln)
	rf.url = "http://" + ln.Addr().String()
	rf.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, DisableCompression: true}, Timeout: o.RequestTimeout}
	return rf, nil
}

// startSidecar serves a kvtransfer sidecar for the decoder on loopback and
// returns its address.
func (rf *realFleet) startSidecar(decoder string, legs []string) (string, error) {
	allow, err := kvtransfer.NewAllowlist(legs...)
	if err != nil {
		return "", err
	}
	sc, err := kvtransfer.New(kvtransfer.Options{Decoder: decoder, Allow: allow, Logger: sidecarLog})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		sc.Close()
		return "", err
	}
	srv := &http.Server{Handler: sc, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	rf.sidecars = append(rf.sidecars, srv)
	rf.scs = append(rf.scs, sc)
	return ln.Addr().String(), nil
}

func (rf *realFleet) close() {
	for _, s := range rf.sidecars {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.Shutdown(ctx)
		cancel()
	}
	for _, sc := range rf.scs {
		sc.Close()
	}
	if rf.gw != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rf.gw.Shutdown(ctx)
		cancel()
	}
	if rf.cancel != nil {
		rf.cancel()
		if rf.stack != nil {
			<-rf.runDone
			rf.stack.Close()
		}
	}
	for _, s := range rf.servers {
		s.Close()
	}
	if rf.client != nil {
		rf.client.CloseIdleConnections()
	}
	if rf.dir != "" {
		os.RemoveAll(rf.dir)
	}
}

// finished returns each endpoint's completed-request counter.
func (rf *realFleet) finished() map[string]uint64 {
	out := map[string]uint64{}
	for _, s := range rf.servers {
		out[s.Name()] = s.Engine.Snapshot().Finished
	}
	return out
}

// RunReal benchmarks every configuration over real HTTP, one cold fleet per
// configuration (levels always run back to back: a ramp).
func RunReal(ctx context.Context, o Options, ro RealOptions) (*Results, error) {
	if o.Workload == nil || o.Fleet == nil || len(o.Configs) == 0 {
		return nil, errors.New("bench: a workload, a fleet and at least one configuration are required")
	}
	if ro.TimeScale <= 0 {
		ro.TimeScale = 4
	}
	if ro.ScrapeInterval <= 0 {
		ro.ScrapeInterval = 25 * time.Millisecond
	}
	if ro.RequestTimeout <= 0 {
		ro.RequestTimeout = 120 * time.Second
	}
	spec := o.Workload
	seed := o.Seed
	if seed == 0 {
		seed = max(spec.Seed, 1)
	}
	plan, err := spec.Plan(seed)
	if err != nil {
		return nil, err
	}
	res := &Results{SchemaVersion: SchemaVersion, Mode: "real", Seed: seed, Workload: workloadInfo(spec), Fleet: fleetInfo(o.Fleet)}
	if o.KneeBoundMs > 0 {
		res.Workload.KneeBoundMs = o.KneeBoundMs
	}
	var mu sync.Mutex
	for _, c := range o.Configs {
		cr, err := runReal(ctx, c, plan, o.Fleet, ro, &progressBar{w: o.Progress, tty: isTerminal(o.Progress), mu: &mu, name: c.Name})
		if err != nil {
			return nil, err
		}
		res.Configs = append(res.Configs, cr)
	}
	if err := finish(res, o.Baseline); err != nil {
		return nil, err
	}
	return res, nil
}

func runReal(ctx context.Context, c *Config, plan *workloads.Plan, fleet *Fleet, ro RealOptions, pb *progressBar) (ConfigResult, error) {
	cr := ConfigResult{Name: c.Name, File: c.File}
	spec := plan.Spec
	for _, g := range levelGroups(plan) {
		rf, err := startRealFleet(ctx, c, fleet, spec.Model, ro)
		if err != nil {
			cr.Error = err.Error()
			pb.fail(err)
			return cr, nil
		}
		total := 0
		for _, li := range g {
			total += plan.Levels[li].Requests()
		}
		pb.start(levelLabel(spec, plan.Levels[g[0]].Load, len(g) > 1), total)
		lg := &loadGen{rf: rf, spec: spec, scale: ro.TimeScale, start: time.Now(), pb: pb, total: total}
		// snapshots[k] is taken when level g[k] starts; one more at the end
		var snaps []map[string]uint64
		var rels []float64
		snap := func() {
			snaps = append(snaps, rf.finished())
			rels = append(rels, countReleases(rf.stack.Registry))
		}
		var wg sync.WaitGroup
		stage := time.Duration(spec.Arrival.DurationSeconds * float64(time.Second))
		for k, li := range g {
			lv := &plan.Levels[li]
			snap()
			if lv.Mode == workloads.ModeClosed {
				lg.closed(ctx, li, lv)
				continue
			}
			lg.open(ctx, li, lv, time.Duration(k)*stage, &wg)
		}
		wg.Wait()
		snap()
		pb.end()
		dest := map[string]bool{}
		for _, sv := range rf.servers {
			dest[sv.Name()] = sv.Role() == sim.RoleDecode || sv.Role() == sim.RoleBoth
		}
		addPredictorErrorFrom(&cr, rf.stack.Registry)
		rf.close()
		if err := ctx.Err(); err != nil {
			return cr, err
		}
		for k, li := range g {
			lstart := time.Duration(0)
			if spec.Arrival.Ramp {
				lstart = time.Duration(k) * stage
			}
			lr := aggregate(plan.Levels[li].Load, lg.take(li), lstart, rels[k+1]-rels[k])
			// Requests each engine completed during the level (encoder and
			// prefill legs included); imbalance over the destination pool.
			lr.RequestsPerEndpoint = map[string]int{}
			mx, sum, n := 0, 0, 0
			for name, fin := range snaps[k+1] {
				d := int(fin - snaps[k][name])
				lr.RequestsPerEndpoint[name] = d
				if dest[name] {
					mx, sum, n = max(mx, d), sum+d, n+1
				}
			}
			lr.Imbalance = 0
			if sum > 0 {
				lr.Imbalance = float64(mx) / (float64(sum) / float64(n))
			}
			cr.Levels = append(cr.Levels, lr)
		}
	}
	return cr, nil
}

// loadGen plays a plan over HTTP. Times are recorded in simulated time
// (wall × scale since start).
type loadGen struct {
	rf     *realFleet
	spec   *workloads.Spec
	scale  float64
	start  time.Time
	pb     *progressBar
	mu     sync.Mutex
	recs   []record
	done   int
	total  int
	nextID int
}

func (g *loadGen) sim() time.Duration { return time.Duration(float64(time.Since(g.start)) * g.scale) }

func (g *loadGen) wall(d time.Duration) time.Duration { return time.Duration(float64(d) / g.scale) }

func (g *loadGen) take(li int) []record {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out, rest []record
	for _, r := range g.recs {
		if r.level == li {
			out = append(out, r)
		} else {
			rest = append(rest, r)
		}
	}
	g.recs = rest
	return out
}

// open starts every session of a level at its arrival time (offset is the
// level's start in a ramp) and returns after the last arrival; wg tracks
// the sessions still playing.
func (g *loadGen) open(ctx context.Context, li int, lv *workloads.Level, offset time.Duration, wg *sync.WaitGroup) {
	base := g.start.Add(g.wall(offset))
	for i := range lv.Sessions {
		ss := &lv.Sessions[i]
		if d := time.Until(base.Add(g.wall(ss.Start))); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.conversation(ctx, li, ss.Conv)
		}()
	}
	if end := base.Add(g.wall(time.Duration(g.spec.Arrival.DurationSeconds * float64(time.Second)))); time.Until(end) > 0 {
		t := time.NewTimer(time.Until(end))
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

func (g *loadGen) closed(ctx context.Context, li int, lv *workloads.Level) {
	var wg sync.WaitGroup
	next := make(chan *workloads.Conversation)
	for range max(lv.Concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range next {
				g.conversation(ctx, li, c)
			}
		}()
	}
	for _, ss := range lv.Sessions {
		select {
		case next <- ss.Conv:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
}

func (g *loadGen) conversation(ctx context.Context, li int, c *workloads.Conversation) {
	for k := range c.Turns {
		rec := g.turn(ctx, li, c, &c.Turns[k])
		g.mu.Lock()
		g.recs = append(g.recs, rec)
		g.done++
		done := g.done
		g.mu.Unlock()
		g.pb.update(done, g.total)
		if rec.failed {
			g.mu.Lock()
			g.done += len(c.Turns) - k - 1
			g.mu.Unlock()
			return
		}
	}
}

func (g *loadGen) turn(ctx context.Context, li int, c *workloads.Conversation, t *workloads.Turn) record {
	g.mu.Lock()
	g.nextID++
	id := "bench-" + strconv.Itoa(g.nextID)
	g.mu.Unlock()
	var content any = t.Text()
	if len(t.Images) > 0 {
		parts := []map[string]any{{"type": "text", "text": t.Text()}}
		for _, im := range t.Images {
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]string{"url": pngDataURL(im)}})
		}
		content = parts
	}
	body, _ := json.Marshal(map[string]any{
		"model": g.spec.Model, "stream": true, "stream_options": map[string]bool{"include_usage": true},
		"max_tokens": t.Output, "ignore_eos": true,
		"messages": []map[string]any{{"role": "user", "content": content}},
	})
	rec := record{level: li, slo: c.SLO, prompt: t.PromptTokens()}
	rec.issued = g.sim()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.rf.url+profiles.PathChatCompletions, bytes.NewReader(body))
	if err != nil {
		rec.failed, rec.finish = true, g.sim()
		return rec
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-request-id", id)
	resp, err := g.rf.client.Do(req)
	if err != nil {
		rec.failed, rec.finish = true, g.sim()
		return rec
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		rec.failed, rec.finish = true, g.sim()
		return rec
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		data := bytes.TrimSpace(line[5:])
		if string(data) == "[DONE]" {
			break
		}
		var ch struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   *struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				Details          *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal(data, &ch) != nil {
			continue
		}
		if rec.first == 0 && len(ch.Choices) > 0 {
			rec.first = g.sim()
		}
		if u := ch.Usage; u != nil {
			rec.prompt, rec.output = u.PromptTokens, u.CompletionTokens
			if u.Details != nil {
				rec.cached = u.Details.CachedTokens
			}
		}
	}
	rec.finish = g.sim()
	if sc.Err() != nil || rec.first == 0 {
		rec.failed = true
	}
	return rec
}

// pngDataURL is a PNG header (signature + IHDR) with the image's size and a
// tEXt chunk carrying its hash: enough for header-reading token counters,
// and distinct per image so encoder caches key it correctly.
func pngDataURL(im workloads.Image) string {
	var b bytes.Buffer
	b.Write([]byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'})
	chunk := func(typ string, data []byte) {
		var l [4]byte
		l[0], l[1], l[2], l[3] = byte(len(data)>>24), byte(len(data)>>16), byte(len(data)>>8), byte(len(data))
		b.Write(l[:])
		b.WriteString(typ)
		b.Write(data)
		b.Write([]byte{0, 0, 0, 0}) // CRC unchecked by header readers
	}
	ihdr := []byte{byte(im.Width >> 24), byte(im.Width >> 16), byte(im.Width >> 8), byte(im.Width),
		byte(im.Height >> 24), byte(im.Height >> 16), byte(im.Height >> 8), byte(im.Height), 8, 2, 0, 0, 0}
	chunk("IHDR", ihdr)
	chunk("tEXt", []byte("id\x00"+strconv.FormatUint(im.Hash, 16)))
	return "data:image/png;base64," + base64Std(b.Bytes())
}

var sidecarLog = slog.New(slog.DiscardHandler)
