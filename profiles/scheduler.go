package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// EndpointLister returns the current ready endpoints. The slice must not be
// modified by the caller.
type EndpointLister interface {
	Endpoints() []*Endpoint
}

// EndpointList is a fixed EndpointLister, handy in tests and the simulator.
type EndpointList []*Endpoint

// Endpoints implements EndpointLister.
func (l EndpointList) Endpoints() []*Endpoint { return l }

// Options configure a Scheduler.
type Options struct {
	Endpoints  EndpointLister        // required to schedule
	Clock      Clock                 // WallClock when nil
	Registerer prometheus.Registerer // a private registry when nil
	ConfigDir  string                // base for relative paths in parameters
	Context    context.Context       // background work stops when it is done
	// KeepStale keeps endpoints whose metrics scrape is failing among the
	// candidates. By default they are left out while at least one endpoint
	// has fresh metrics: a dead engine stops answering /metrics first.
	KeepStale bool
}

// Parameterized is implemented by plugins that can show their resolved
// parameters (defaults applied) for `spillway validate`.
type Parameterized interface {
	Params() any
}

// ProducerOrder lets producers that consume another producer's output run
// after it; lower runs first, the default is 100.
type ProducerOrder interface {
	Order() int
}

// Scheduler runs the configured profiles for each request and dispatches the
// lifecycle hooks.
type Scheduler struct {
	cfg       *Config
	opts      Options
	ctx       context.Context
	cancel    context.CancelFunc
	plugins   []Plugin
	byName    map[string]Plugin
	handler   ProfileHandler
	producers []producerEntry
	profiles  map[string]*profile
	order     []string
	implicit  []string // plugins added because the file did not list them
	sat       *SaturationDetector

	dispatch []DispatchHook
	first    []FirstChunkHook
	prefill  []PrefillDoneHook
	finish   []FinishHook
	fail     []FailHook
	epHooks  []EndpointsHook

	m *schedMetrics
}

type producerEntry struct {
	p   Producer
	obs prometheus.Observer
}

type profile struct {
	name    string
	filters []filterEntry
	scorers []scorerEntry
	picker  Picker
	pickObs prometheus.Observer
	pool    sync.Pool // *[]float64 scratch
}

type filterEntry struct {
	f   Filter
	obs prometheus.Observer
}

type scorerEntry struct {
	s      Scorer
	weight float64
	obs    prometheus.Observer
}

// New builds a scheduler from a parsed config.
func New(c *Config, opts Options) (*Scheduler, error) {
	if opts.Clock == nil {
		opts.Clock = WallClock
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	parent := opts.Context
	if parent == nil {
		parent = context.Background()
	}
	s := &Scheduler{cfg: c, opts: opts, byName: map[string]Plugin{}, profiles: map[string]*profile{}}
	s.ctx, s.cancel = context.WithCancel(parent)
	s.m = newSchedMetrics(opts.Registerer)
	if err := s.build(); err != nil {
		s.cancel()
		return nil, fmt.Errorf("%s: %w", c.file, err)
	}
	return s, nil
}

func (s *Scheduler) build() error {
	sat, err := parseSaturation(s.cfg.SaturationDetector)
	if err != nil {
		return err
	}
	s.sat = sat
	specs := append([]PluginSpec(nil), s.cfg.Plugins...)
	hasType := func(t string) bool {
		for _, p := range specs {
			if p.Type == t {
				return true
			}
		}
		return false
	}
	// Prefix and load producers consume token counts: give configs written
	// for routers that tokenised inside the prefix plugin a default token
	// producer.
	if _, ok := Lookup("token-producer"); ok && !hasType("token-producer") {
		specs = append([]PluginSpec{{Type: "token-producer"}}, specs...)
		s.implicit = append(s.implicit, "token-producer")
	}
	for i, spec := range specs {
		if spec.Type == "" {
			return fmt.Errorf("plugins[%d]: type is required", i)
		}
		name := spec.Name
		if name == "" {
			name = spec.Type
		}
		if _, dup := s.byName[name]; dup {
			return fmt.Errorf("plugins[%d]: duplicate plugin name %q (give each instance a distinct name)", i, name)
		}
		f, ok := Lookup(spec.Type)
		if !ok {
			return fmt.Errorf("plugin %q: unknown plugin type %q (known types: %s)", name, spec.Type, strings.Join(RegisteredTypes(), ", "))
		}
		p, err := f(name, spec.Parameters, s)
		if err != nil {
			return fmt.Errorf("plugin %q (type %s): %w", name, spec.Type, err)
		}
		s.byName[name] = p
		s.plugins = append(s.plugins, p)
	}
	for _, p := range s.plugins {
		if b, ok := p.(Binder); ok {
			if err := b.Bind(s); err != nil {
				return fmt.Errorf("plugin %q (type %s): %w", p.TypedName().Name, p.TypedName().Type, err)
			}
		}
	}
	for _, ps := range s.cfg.SchedulingProfiles {
		if err := s.buildProfile(ps); err != nil {
			return err
		}
	}
	for _, p := range s.plugins {
		if h, ok := p.(ProfileHandler); ok {
			if s.handler != nil {
				return fmt.Errorf("plugins %q and %q are both profile handlers; keep one", s.handler.TypedName().Name, p.TypedName().Name)
			}
			s.handler = h
		}
		if pr, ok := p.(Producer); ok {
			s.producers = append(s.producers, producerEntry{p: pr, obs: s.m.plugin.WithLabelValues("", pr.TypedName().Type, pr.TypedName().Name)})
		}
	}
	sort.SliceStable(s.producers, func(i, j int) bool { return order(s.producers[i].p) < order(s.producers[j].p) })
	if s.handler == nil {
		if len(s.order) != 1 {
			return fmt.Errorf("%d scheduling profiles need a profile handler plugin (e.g. disagg-profile-handler)", len(s.order))
		}
		f, ok := Lookup("single-profile-handler")
		if !ok {
			return fmt.Errorf("single-profile-handler is not registered")
		}
		p, err := f("single-profile-handler", nil, s)
		if err != nil {
			return err
		}
		s.handler = p.(ProfileHandler)
		s.plugins = append(s.plugins, p)
		s.byName[p.TypedName().Name] = p
		s.implicit = append(s.implicit, "single-profile-handler")
	}
	s.collectHooks()
	return nil
}

func order(p Producer) int {
	if o, ok := p.(ProducerOrder); ok {
		return o.Order()
	}
	return 100
}

func (s *Scheduler) buildProfile(ps ProfileSpec) error {
	if ps.Name == "" {
		return fmt.Errorf("schedulingProfiles: a profile needs a name")
	}
	if _, dup := s.profiles[ps.Name]; dup {
		return fmt.Errorf("schedulingProfiles: duplicate profile %q", ps.Name)
	}
	pr := &profile{name: ps.Name}
	for _, ref := range ps.Plugins {
		p, ok := s.byName[ref.PluginRef]
		if !ok {
			return fmt.Errorf("profile %q: pluginRef %q names no plugin in the plugins list", ps.Name, ref.PluginRef)
		}
		tn := p.TypedName()
		obs := s.m.plugin.WithLabelValues(ps.Name, tn.Type, tn.Name)
		switch v := p.(type) {
		case Picker:
			if ref.Weight != nil {
				return fmt.Errorf("profile %q: %q is a picker; weight applies to scorers only", ps.Name, ref.PluginRef)
			}
			if pr.picker != nil {
				return fmt.Errorf("profile %q: two pickers (%q and %q); keep one", ps.Name, pr.picker.TypedName().Name, tn.Name)
			}
			pr.picker = v
			pr.pickObs = obs
		case Filter:
			if ref.Weight != nil {
				return fmt.Errorf("profile %q: %q is a filter; weight applies to scorers only", ps.Name, ref.PluginRef)
			}
			pr.filters = append(pr.filters, filterEntry{f: v, obs: obs})
		case Scorer:
			w := 1.0
			if ref.Weight != nil {
				w = *ref.Weight
			}
			if w < 0 {
				return fmt.Errorf("profile %q: scorer %q: weight must be ≥ 0, got %g", ps.Name, ref.PluginRef, w)
			}
			pr.scorers = append(pr.scorers, scorerEntry{s: v, weight: w, obs: obs})
		default:
			return fmt.Errorf("profile %q: %q (type %s) is not a filter, scorer or picker", ps.Name, ref.PluginRef, tn.Type)
		}
	}
	if pr.picker == nil {
		f, ok := Lookup("max-score-picker")
		if !ok {
			return fmt.Errorf("max-score-picker is not registered")
		}
		p, err := f("max-score-picker", nil, s)
		if err != nil {
			return err
		}
		pr.picker = p.(Picker)
		pr.pickObs = s.m.plugin.WithLabelValues(ps.Name, "max-score-picker", "max-score-picker")
		s.plugins = append(s.plugins, p) // so that Seeders can reach it
	}
	pr.pool.New = func() any { b := make([]float64, 0, 64); return &b }
	s.profiles[ps.Name] = pr
	s.order = append(s.order, ps.Name)
	return nil
}

func (s *Scheduler) collectHooks() {
	seen := map[Plugin]bool{}
	for _, p := range s.plugins {
		if seen[p] {
			continue
		}
		seen[p] = true
		if h, ok := p.(DispatchHook); ok {
			s.dispatch = append(s.dispatch, h)
		}
		if h, ok := p.(FirstChunkHook); ok {
			s.first = append(s.first, h)
		}
		if h, ok := p.(PrefillDoneHook); ok {
			s.prefill = append(s.prefill, h)
		}
		if h, ok := p.(FinishHook); ok {
			s.finish = append(s.finish, h)
		}
		if h, ok := p.(FailHook); ok {
			s.fail = append(s.fail, h)
		}
		if h, ok := p.(EndpointsHook); ok {
			s.epHooks = append(s.epHooks, h)
		}
	}
}

// Handle implementation.

// Plugin implements Handle.
func (s *Scheduler) Plugin(name string) (Plugin, bool) { p, ok := s.byName[name]; return p, ok }

// Plugins implements Handle.
func (s *Scheduler) Plugins() []Plugin { return s.plugins }

// Clock implements Handle.
func (s *Scheduler) Clock() Clock { return s.opts.Clock }

// Registerer implements Handle.
func (s *Scheduler) Registerer() prometheus.Registerer { return s.opts.Registerer }

// Context implements Handle.
func (s *Scheduler) Context() context.Context { return s.ctx }

// ConfigDir implements Handle.
func (s *Scheduler) ConfigDir() string { return s.opts.ConfigDir }

// Close stops the plugins' background work.
func (s *Scheduler) Close() { s.cancel() }

// Config returns the config the scheduler was built from.
func (s *Scheduler) Config() *Config { return s.cfg }

// SetEndpoints replaces the endpoint lister (before serving).
func (s *Scheduler) SetEndpoints(l EndpointLister) { s.opts.Endpoints = l }

// OnEndpointAdded forwards an endpoint arrival to the plugins.
func (s *Scheduler) OnEndpointAdded(ep *Endpoint) {
	for _, h := range s.epHooks {
		h.OnEndpointAdded(ep)
	}
}

// OnEndpointRemoved forwards an endpoint removal to the plugins.
func (s *Scheduler) OnEndpointRemoved(ep *Endpoint) {
	for _, h := range s.epHooks {
		h.OnEndpointRemoved(ep)
	}
}

// candidates returns the endpoints a request may use, honouring the subset
// hint.
func (s *Scheduler) candidates(req *Request) []*Endpoint {
	var all []*Endpoint
	if s.opts.Endpoints != nil {
		all = s.opts.Endpoints.Endpoints()
	}
	if !s.opts.KeepStale {
		all = s.withoutFailing(all, req)
	}
	if req.SubsetHint == nil {
		return all
	}
	out := make([]*Endpoint, 0, len(req.SubsetHint))
	for _, e := range all {
		for _, a := range req.SubsetHint {
			if e.Address == a {
				out = append(out, e)
				break
			}
		}
	}
	return out
}

// withoutFailing drops endpoints whose scrapes fail, role by role: within
// a role (a pool) they are dropped only while another endpoint of that role
// has fresh metrics. When none has, the metrics, not the engines, are the
// problem, and the pool stays eligible.
func (s *Scheduler) withoutFailing(eps []*Endpoint, req *Request) []*Endpoint {
	failing := 0
	for _, e := range eps {
		if e.scrapeFailing() {
			failing++
		}
	}
	if failing == 0 {
		return eps
	}
	// Roles with at least one fresh endpoint; pools are few, a slice is enough.
	var freshRoles []string
	for _, e := range eps {
		if !e.Metrics().Stale && !slices.Contains(freshRoles, e.Role) {
			freshRoles = append(freshRoles, e.Role)
		}
	}
	out := make([]*Endpoint, 0, len(eps))
	dropped := 0
	for _, e := range eps {
		if e.scrapeFailing() && slices.Contains(freshRoles, e.Role) {
			dropped++
			continue
		}
		out = append(out, e)
	}
	if dropped == 0 {
		return eps
	}
	s.m.staleExcluded.Add(float64(dropped))
	if req.Debug() {
		req.Annotate("", "scheduler", fmt.Sprintf("%d endpoint(s) left out: metrics scrape failing", dropped))
	}
	return out
}

// Schedule runs the producers and the profile handler for req.
func (s *Scheduler) Schedule(ctx context.Context, req *Request) (*Result, error) {
	start := time.Now()
	res, err := s.schedule(ctx, req)
	s.m.e2e.Observe(time.Since(start).Seconds())
	if err != nil {
		s.m.scheduleErrors.WithLabelValues(fmt.Sprint(HTTPStatus(err))).Inc()
		return nil, err
	}
	for name, pr := range res.Profiles {
		if t := pr.Target(); t != nil {
			s.m.decisions.WithLabelValues(name, t.Name).Inc()
		}
	}
	return res, nil
}

func (s *Scheduler) schedule(ctx context.Context, req *Request) (*Result, error) {
	eps := s.candidates(req)
	if len(eps) == 0 {
		if req.SubsetHint != nil {
			return nil, &StatusError{Code: 503, Message: "no ready endpoint in the subset hint"}
		}
		return nil, ErrNoEndpoints
	}
	if s.sat != nil && sheddable(req) && s.sat.Saturated(eps, s.opts.Clock.Now()) {
		s.m.shed.Inc()
		return nil, ErrShed
	}
	for _, pe := range s.producers {
		t0 := time.Now()
		err := pe.p.Produce(ctx, req, eps)
		pe.obs.Observe(time.Since(t0).Seconds())
		if err != nil {
			if HTTPStatus(err) != 500 {
				return nil, err
			}
			return nil, fmt.Errorf("producer %s: %w", pe.p.TypedName(), err)
		}
	}
	run := &runner{s: s, eps: eps, cs: map[string]*ProfileResult{}}
	res, err := s.handler.Handle(ctx, req, run)
	if err != nil {
		return nil, err
	}
	if res == nil || len(res.Destination()) == 0 {
		return nil, ErrNoEndpoints
	}
	return res, nil
}

type runner struct {
	s   *Scheduler
	eps []*Endpoint
	cs  map[string]*ProfileResult
}

func (r *runner) Has(profile string) bool { _, ok := r.s.profiles[profile]; return ok }
func (r *runner) Profiles() []string      { return r.s.order }

func (r *runner) Run(ctx context.Context, name string, req *Request) (*ProfileResult, error) {
	p, ok := r.s.profiles[name]
	if !ok {
		return nil, fmt.Errorf("no scheduling profile %q", name)
	}
	res, err := p.run(ctx, &CycleState{Profile: name, Results: r.cs}, req, r.eps)
	if err != nil {
		return nil, err
	}
	r.cs[name] = res
	return res, nil
}

func (p *profile) run(ctx context.Context, cs *CycleState, req *Request, eps []*Endpoint) (*ProfileResult, error) {
	for _, fe := range p.filters {
		t0 := time.Now()
		out := fe.f.Filter(ctx, cs, req, eps)
		fe.obs.Observe(time.Since(t0).Seconds())
		if req.Debug() {
			req.Annotate(p.name, fe.f.TypedName().Name, fmt.Sprintf("%d → %d endpoints", len(eps), len(out)))
		}
		eps = out
		if len(eps) == 0 {
			return nil, &StatusError{Code: 503, Message: fmt.Sprintf("profile %s: no endpoint left after filter %s", p.name, fe.f.TypedName().Name)}
		}
	}
	totals := make([]float64, len(eps))
	if len(p.scorers) > 0 {
		bp := p.pool.Get().(*[]float64)
		scratch := (*bp)[:0]
		for range eps {
			scratch = append(scratch, 0)
		}
		for _, se := range p.scorers {
			clear(scratch)
			t0 := time.Now()
			se.s.Score(ctx, cs, req, eps, scratch)
			se.obs.Observe(time.Since(t0).Seconds())
			for i, v := range scratch {
				totals[i] += se.weight * v
			}
		}
		*bp = scratch
		p.pool.Put(bp)
	}
	t0 := time.Now()
	targets := p.picker.Pick(ctx, cs, req, eps, totals)
	p.pickObs.Observe(time.Since(t0).Seconds())
	if len(targets) == 0 {
		return nil, &StatusError{Code: 503, Message: fmt.Sprintf("profile %s: picker chose no endpoint", p.name)}
	}
	return &ProfileResult{Profile: p.name, Targets: targets, Candidates: len(eps)}, nil
}

// Describe renders the resolved profiles: each profile's plugin chain with
// parameters after defaults, and what plugins explain about themselves.
func (s *Scheduler) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "config: %s (apiVersion %s)\n", s.cfg.file, s.cfg.APIVersion)
	fmt.Fprintf(&b, "profile handler: %s%s\n", s.handler.TypedName(), params(s.handler))
	for _, pr := range s.producers {
		fmt.Fprintf(&b, "producer: %s%s\n", pr.p.TypedName(), params(pr.p))
		describe(&b, pr.p, "  ")
	}
	if len(s.implicit) > 0 {
		fmt.Fprintf(&b, "added with defaults (not in the file): %s\n", strings.Join(s.implicit, ", "))
	}
	if s.sat != nil {
		fmt.Fprintf(&b, "saturation detector: queueDepthThreshold %d, kvCacheUtilThreshold %g, metricsStalenessThreshold %s; requests with %s < 0 are shed (429) when no endpoint has capacity\n",
			s.sat.QueueDepthThreshold, s.sat.KVCacheUtilThreshold, s.sat.MetricsStalenessThreshold.Std(), PriorityHeader)
	}
	var ignored []string
	for name, raw := range map[string][]byte{"dataLayer": s.cfg.DataLayer, "flowControl": s.cfg.FlowControl, "parser": s.cfg.Parser, "requestHandler": s.cfg.RequestHandler, "data": s.cfg.Data} {
		if len(raw) > 0 {
			ignored = append(ignored, name)
		}
	}
	if len(s.cfg.FeatureGates) > 0 {
		ignored = append(ignored, "featureGates "+strings.Join(s.cfg.FeatureGates, ","))
	}
	if len(ignored) > 0 {
		sort.Strings(ignored)
		fmt.Fprintf(&b, "accepted but not applied by spillway: %s\n", strings.Join(ignored, "; "))
	}
	for _, name := range s.order {
		p := s.profiles[name]
		fmt.Fprintf(&b, "profile %q:\n", name)
		for _, f := range p.filters {
			fmt.Fprintf(&b, "  filter  %s%s\n", f.f.TypedName(), params(f.f))
			describe(&b, f.f, "    ")
		}
		for _, sc := range p.scorers {
			fmt.Fprintf(&b, "  scorer  %s weight=%g%s\n", sc.s.TypedName(), sc.weight, params(sc.s))
			describe(&b, sc.s, "    ")
		}
		fmt.Fprintf(&b, "  picker  %s%s\n", p.picker.TypedName(), params(p.picker))
	}
	return b.String()
}

func params(p Plugin) string {
	pp, ok := p.(Parameterized)
	if !ok {
		return ""
	}
	js, err := json.Marshal(pp.Params())
	if err != nil || string(js) == "{}" || string(js) == "null" {
		return ""
	}
	return " " + string(js)
}

func describe(b *strings.Builder, p Plugin, indent string) {
	if d, ok := p.(Describer); ok {
		for _, line := range d.Describe() {
			b.WriteString(indent + line + "\n")
		}
	}
}
