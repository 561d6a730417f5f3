package sim

import (
	"errors"
	"math"
	"time"
)

// Role is what an endpoint serves (llm-d.ai/role values).
type Role string

const (
	RoleBoth    Role = "both"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
	RoleEncode  Role = "encode"
)

// ParseRole validates a role name ("" = both).
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case "":
		return RoleBoth, nil
	case RoleBoth, RolePrefill, RoleDecode, RoleEncode:
		return Role(s), nil
	}
	return "", errors.New("sim: unknown role " + s + " (both, prefill, decode, encode)")
}

// Request is one sequence submitted to an Engine. The engine reads Prompt and
// BlockHashes and never writes them (callers may share them between requests,
// e.g. the turns of one conversation). A Request is submitted once.
type Request struct {
	ID     string
	Prompt []uint32
	// BlockHashes optionally carries the chained hashes of Prompt's full
	// blocks (BlockHashes(Prompt, 16), or a longer slice of the same chain),
	// so a workload can hash a conversation once. Nil: the engine hashes.
	BlockHashes []uint64
	MaxTokens   int // output tokens to generate, exactly (ignore_eos); ≥ 1
	// OutputTokens optionally names the tokens the request generates. With
	// them (or with BlockHashes covering prompt+output), full output blocks
	// enter the prefix cache at completion, as vLLM caches decoded blocks,
	// so a next turn that quotes the reply hits. Read-only, like Prompt.
	OutputTokens []uint32

	// RemotePrefill marks a decode leg whose prompt KV arrives from a prefill
	// engine: it waits TransferDelay (counted as waiting), then computes only
	// the last prompt token (vLLM recomputes it) and decodes.
	RemotePrefill bool
	TransferDelay time.Duration
	// HoldKV keeps the request's KV blocks pinned after it completes (a
	// prefill leg waiting for its decode engine to pull them) until
	// Engine.Release.
	HoldKV bool

	// Callbacks, called on the engine's goroutine (the event loop in virtual
	// time; under the engine lock in real time: do not block).
	OnFirstToken func(r *Request, t time.Time)
	OnToken      func(r *Request, t time.Time, generated int) // nil is cheapest
	OnComplete   func(r *Request, res Result)
	UserData     any

	// engine state
	target    int // tokens whose KV must exist before the next token samples
	computed  int
	generated int
	cachedTok int
	looked    bool
	counted   bool
	pin       *kvNode
	pinEnd    int
	priv      int
	sched     int
	arrival   int64
	firstTok  int64
	preempts  int
	done      bool
	held      bool
	engine    *Engine
}

// Result is a finished request's accounting (times in simulated time).
type Result struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int // prompt tokens served from the prefix cache
	Arrival          time.Time
	FirstToken       time.Time
	Finish           time.Time
	Preemptions      int
	Err              error
}

// TTFT is FirstToken − Arrival.
func (r Result) TTFT() time.Duration { return r.FirstToken.Sub(r.Arrival) }

// Snapshot is an engine's live state, as its /metrics would report it.
type Snapshot struct {
	Waiting       int     // queued, preempted or awaiting KV transfer
	Running       int     // scheduled sequences
	KVUsage       float64 // used blocks / capacity, 0..1 (vllm:kv_cache_usage_perc)
	UsedBlocks    int
	CachedBlocks  int // blocks in the prefix cache (referenced or not)
	NumGPUBlocks  int
	BlockSize     int
	PrefixQueries uint64 // prompt tokens looked up
	PrefixHits    uint64 // of which cached
	PromptTokens  uint64
	GenTokens     uint64
	Preemptions   uint64
	Finished      uint64
	Held          int // completed prefill legs still holding KV
}

// driver is the clock behind an engine: the only difference between the
// virtual-time and the real-time modes.
type driver interface {
	now() int64                      // simulated ns since the epoch
	wake(e *Engine)                  // e has work and is idle: start a step now
	after(d int64, fn func())        // run fn d simulated ns from now
	reschedule(e *Engine, end int64) // the planned step of e now ends at end
}

// Engine is one simulated vLLM engine (one endpoint). Its methods are not
// safe for concurrent use; the real-time wrapper serialises them.
type Engine struct {
	Name  string
	Prof  Profile
	Role  Role
	Epoch time.Time // simulated time zero

	kv           *kvCache
	noKV         bool
	drv          driver
	waiting      []*Request
	running      []*Request
	sched        []*Request
	busy         bool
	transferring int
	held         int
	stepEnd      int64
	stepStart    int64
	stepGen      uint64 // bumps when a planned step end moves
	// macro-stepping (virtual time only): k identical decode-only steps
	// planned at once; exact, because an arrival truncates the run at the
	// first step boundary after it.
	macroOK bool
	loopIdx int32
	// step-time constants in seconds (Profile.StepTime, precomputed)
	fA, fAttn, fBase, fSeq, fCtx float64
	macroK                       int
	macroDec                     int
	macroCtx                     int64

	prefixQueries, prefixHits, promptTokens, genTokens, preemptions, finished uint64

	events *eventBuffer // nil unless KV events are enabled
}

// ErrTooLong rejects a request that can never fit.
var ErrTooLong = errors.New("sim: request exceeds max_model_len or KV capacity")

func newEngine(name string, p Profile, role Role, epoch time.Time, drv driver) *Engine {
	e := &Engine{Name: name, Prof: p, Role: role, Epoch: epoch, drv: drv, kv: newKVCache(p.NumGPUBlocks)}
	e.fA, e.fAttn, e.fBase = p.perToken(), p.perToken()*p.AttnRatio, p.StepBase.Seconds()
	e.fSeq, e.fCtx = p.DecodePerSeq.Seconds(), p.DecodePerCtxToken.Seconds()
	e.noKV = role == RoleEncode
	return e
}

func (e *Engine) t(ns int64) time.Time { return e.Epoch.Add(time.Duration(ns)) }

// Now is the engine's current simulated time.
func (e *Engine) Now() time.Time { return e.t(e.drv.now()) }

func (e *Engine) blocks(tokens int) int {
	return (tokens + e.Prof.BlockSize - 1) / e.Prof.BlockSize
}

// submit queues r at the current simulated time.
func (e *Engine) submit(r *Request) {
	if r.BlockHashes == nil && !e.noKV {
		r.BlockHashes = BlockHashes(r.Prompt, e.Prof.BlockSize)
	}
	now := e.drv.now()
	r.engine = e
	r.arrival = now
	if r.MaxTokens < 1 {
		r.MaxTokens = 1
	}
	if len(r.Prompt) == 0 || len(r.Prompt)+r.MaxTokens > e.Prof.MaxModelLen ||
		(!e.noKV && e.blocks(len(r.Prompt)+r.MaxTokens) > e.Prof.NumGPUBlocks) {
		e.fail(r, now, ErrTooLong)
		return
	}
	r.target = len(r.Prompt)
	if r.RemotePrefill && r.TransferDelay > 0 {
		e.transferring++
		e.drv.after(int64(r.TransferDelay), func() {
			e.transferring--
			e.enqueue(r)
		})
		return
	}
	e.enqueue(r)
}

func (e *Engine) enqueue(r *Request) {
	e.waiting = append(e.waiting, r)
	if !e.busy {
		e.busy = true
		e.drv.wake(e)
		return
	}
	if e.macroK > 1 {
		e.truncateMacro(e.drv.now())
	}
}

// macroBound is the end of the i-th (1-based) step of the macro run.
func (e *Engine) macroBound(i int) int64 {
	t := e.stepStart
	for j := 0; j < i; j++ {
		t += int64(e.decodeStepTime(e.macroDec, e.macroCtx+int64(j*e.macroDec)))
	}
	return t
}

// truncateMacro cuts the macro run at the first step boundary ≥ now.
func (e *Engine) truncateMacro(now int64) {
	i := 1
	for ; i < e.macroK; i++ {
		if e.macroBound(i) >= now {
			break
		}
	}
	if i >= e.macroK {
		return
	}
	for _, r := range e.sched {
		r.sched = i
		if extra := r.pinEnd + r.priv - e.blocks(r.computed+i); extra > 0 {
			r.priv -= extra
			e.kv.release(extra)
		}
	}
	e.macroK = i
	e.stepEnd = e.macroBound(i)
	e.stepGen++
	e.drv.reschedule(e, e.stepEnd)
}

func (e *Engine) decodeStepTime(d int, ctx int64) time.Duration {
	s := e.fBase + e.fSeq*float64(d) + e.fCtx*float64(ctx)
	return time.Duration(math.Round(s * 1e9))
}

func (e *Engine) fail(r *Request, now int64, err error) {
	r.done = true
	if r.OnComplete != nil {
		r.OnComplete(r, Result{PromptTokens: len(r.Prompt), Arrival: e.t(r.arrival), Finish: e.t(now), Err: err})
	}
}

// lookup does the prefix-cache lookup when a request is first scheduled.
func (e *Engine) lookup(r *Request) {
	r.looked = true
	if e.noKV {
		r.pin = nil
		return
	}
	// vLLM never hits the last prompt token: at most (len−1)/bs blocks.
	max := (len(r.Prompt) - 1) / e.Prof.BlockSize
	r.pin, r.pinEnd = e.kv.pin(r.BlockHashes, max)
	hit := r.pinEnd * e.Prof.BlockSize
	if !r.counted {
		r.counted = true
		r.cachedTok = hit
		e.prefixQueries += uint64(len(r.Prompt))
		e.prefixHits += uint64(hit)
	}
	r.computed = hit
	if r.RemotePrefill && r.preempts == 0 && r.computed < len(r.Prompt)-1 {
		r.computed = len(r.Prompt) - 1 // KV pulled from the prefill engine (a preempted request recomputes)
	}
}

// grow reserves KV for r to hold tokens tokens.
func (e *Engine) grow(r *Request, tokens int) bool {
	if e.noKV {
		return true
	}
	need := e.blocks(tokens) - r.pinEnd - r.priv
	if need <= 0 {
		return true
	}
	if !e.kv.alloc(need) {
		return false
	}
	r.priv += need
	return true
}

func (e *Engine) dropKV(r *Request, now int64) {
	if e.noKV {
		return
	}
	e.kv.release(r.priv)
	r.priv = 0
	e.kv.unpin(r.pin, now)
	r.pin, r.pinEnd = nil, 0
}

// preempt evicts the lowest-priority running request (recompute mode).
func (e *Engine) preempt(now int64) *Request {
	v := e.running[len(e.running)-1]
	e.running = e.running[:len(e.running)-1]
	e.dropKV(v, now)
	v.looked = false
	v.computed = 0
	v.sched = 0
	v.preempts++
	v.target = len(v.Prompt) + v.generated - 1
	if v.target < len(v.Prompt) {
		v.target = len(v.Prompt)
	}
	e.preemptions++
	e.waiting = append([]*Request{v}, e.waiting...)
	return v
}

// plan composes the next step at now and returns its duration, or false if
// there is nothing runnable.
func (e *Engine) plan(now int64) (int64, bool) {
	p := &e.Prof
	budget := p.MaxNumBatchedTokens
	e.sched = e.sched[:0]
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		n := 1
		if r.computed < r.target {
			n = r.target - r.computed
			if n > budget {
				n = budget
			}
		}
		for !e.grow(r, r.computed+n) {
			v := e.preempt(now)
			preempted = true
			if v == r {
				n = 0
				break
			}
		}
		if n == 0 {
			break
		}
		r.sched = n
		budget -= n
		e.sched = append(e.sched, r)
	}
	blocked := len(e.waiting) > 0 && len(e.running) >= p.MaxNumSeqs
	// As vLLM v1's scheduler (`if not preempted_reqs:` before the WAITING
	// pass): a step that had to preempt admits nobody, not even the request
	// it just preempted, so a KV-starved engine does not re-admit and
	// re-evict within one step; the waiting queue is retried next step.
	for !preempted && len(e.waiting) > 0 && len(e.running) < p.MaxNumSeqs && budget > 0 {
		r := e.waiting[0]
		if !r.looked {
			e.lookup(r)
		}
		n := r.target - r.computed
		if n > budget {
			n = budget
		}
		if !e.grow(r, r.computed+n) {
			// vLLM keeps nothing for a request it could not admit (and a
			// failed lookup does not count as a use for LRU).
			e.kv.unpinQuiet(r.pin)
			r.pin, r.pinEnd = nil, 0
			blocked = true
			r.looked, r.computed = false, 0
			if len(e.running) == 0 && e.held == 0 {
				// Nothing else holds KV: it can never fit.
				e.waiting = e.waiting[1:]
				e.fail(r, now, ErrTooLong)
				continue
			}
			break
		}
		e.waiting = e.waiting[1:]
		e.running = append(e.running, r)
		r.sched = n
		budget -= n
		e.sched = append(e.sched, r)
		if len(e.running) >= p.MaxNumSeqs && len(e.waiting) > 0 {
			blocked = true
		}
	}
	if len(e.sched) == 0 {
		return 0, false
	}
	e.macroK = 0
	// A decode-only step can be repeated exactly while nothing can be
	// admitted: the queue is empty, or its head is blocked on KV or
	// max-num-seqs (decodes only consume KV, and nothing completes before
	// the run's last step).
	if e.macroOK && (len(e.waiting) == 0 || blocked) && !e.noKV {
		if k := e.planMacro(); k > 1 {
			e.stepStart = now
			e.macroK = k
			return e.macroBound(k) - now, true
		}
	}
	return int64(e.stepTime()), true
}

const maxMacro = 64

// planMacro turns a decode-only step into k ≤ 64 steps when nothing can
// change in between (no per-token callbacks, KV for all k tokens free
// without eviction, no completion before the last). The run's KV is
// reserved up front (≤ 4 blocks per sequence early) and trimmed if an
// arrival truncates it.
func (e *Engine) planMacro() int {
	k := maxMacro
	var ctx int64
	for _, r := range e.sched {
		if r.computed < r.target || r.OnToken != nil {
			return 0
		}
		if left := r.MaxTokens - r.generated; left < k {
			k = left
		}
		ctx += int64(r.computed)
	}
	if k < 2 {
		return 0
	}
	for {
		need := 0
		for _, r := range e.sched {
			if n := e.blocks(r.computed+k) - r.pinEnd - r.priv; n > 0 {
				need += n
			}
		}
		if need <= e.kv.free() {
			break
		}
		if k /= 2; k < 2 {
			return 0
		}
	}
	for _, r := range e.sched {
		e.grow(r, r.computed+k)
		r.sched = k
	}
	e.macroDec, e.macroCtx = len(e.sched), ctx
	return k
}

func (e *Engine) stepTime() time.Duration {
	p := &e.Prof
	if e.noKV { // encoder: vision-encoder time per image token
		tok := 0
		for _, r := range e.sched {
			tok += r.sched
		}
		return p.StepBase + time.Duration(tok)*p.EncodePerToken
	}
	s := e.fBase
	var dec int
	var ctx int64
	for _, r := range e.sched {
		if r.computed < r.target {
			n, c := float64(r.sched), float64(r.computed)
			s += e.fA*n + e.fAttn*n*(c+n/2)
		} else {
			dec++
			ctx += int64(r.computed)
		}
	}
	s += e.fSeq*float64(dec) + e.fCtx*float64(ctx)
	return time.Duration(math.Round(s * 1e9))
}

// apply completes the planned step at end.
func (e *Engine) apply(end int64) {
	bs := e.Prof.BlockSize
	finished := false
	for _, r := range e.sched {
		wasPrefill := r.computed < r.target
		ntok := 1
		if !wasPrefill {
			ntok = r.sched // >1 in a macro run
		}
		r.computed += r.sched
		r.sched = 0
		if wasPrefill && !e.noKV {
			// newly computed full prompt blocks enter the prefix cache
			upto := r.computed
			if upto > len(r.Prompt) {
				upto = len(r.Prompt)
			}
			upto /= bs
			if upto > len(r.BlockHashes) {
				upto = len(r.BlockHashes)
			}
			if upto > r.pinEnd {
				var toks []uint32
				if e.events != nil {
					toks = r.Prompt
				}
				var dup int
				r.pin, dup = e.kv.insert(r.pin, r.pinEnd, r.BlockHashes, upto, toks, bs, end)
				r.priv -= upto - r.pinEnd
				_ = dup
				r.pinEnd = upto
			}
		}
		if r.computed < r.target {
			continue // mid-prefill chunk
		}
		r.generated += ntok
		e.genTokens += uint64(ntok)
		if r.firstTok == 0 {
			r.firstTok = end
			e.promptTokens += uint64(len(r.Prompt))
			if r.OnFirstToken != nil {
				r.OnFirstToken(r, e.t(end))
			}
		}
		if r.OnToken != nil {
			r.OnToken(r, e.t(end), r.generated)
		}
		if r.generated >= r.MaxTokens {
			r.done = true
			finished = true
			e.finished++
			if !e.noKV && (r.OutputTokens != nil || len(r.BlockHashes)*bs > len(r.Prompt)) {
				e.cacheOutput(r, end)
			}
			if r.HoldKV && !e.noKV {
				r.held = true
				e.held++
			} else {
				e.dropKV(r, end)
			}
			if r.OnComplete != nil {
				r.OnComplete(r, Result{
					PromptTokens: len(r.Prompt), CompletionTokens: r.generated, CachedTokens: r.cachedTok,
					Arrival: e.t(r.arrival), FirstToken: e.t(r.firstTok), Finish: e.t(end), Preemptions: r.preempts,
				})
			}
		}
	}
	if finished {
		j := 0
		for _, r := range e.running {
			if !r.done {
				e.running[j] = r
				j++
			}
		}
		for k := j; k < len(e.running); k++ {
			e.running[k] = nil
		}
		e.running = e.running[:j]
	}
}

// cacheOutput inserts a finished request's full output blocks.
func (e *Engine) cacheOutput(r *Request, end int64) {
	bs := e.Prof.BlockSize
	upto := r.computed / bs
	hashes := r.BlockHashes
	var toks []uint32
	if r.OutputTokens != nil {
		out := r.OutputTokens
		if n := r.computed - len(r.Prompt); n < len(out) {
			out = out[:max(n, 0)]
		}
		toks = append(r.Prompt[:len(r.Prompt):len(r.Prompt)], out...)
		if len(hashes) < upto {
			hashes = AppendBlockHashes(hashes[:len(hashes):len(hashes)], toks, bs)
			r.BlockHashes = hashes
		}
	}
	if upto > len(hashes) {
		upto = len(hashes)
	}
	if upto <= r.pinEnd {
		return
	}
	if e.events == nil {
		toks = nil
	}
	r.pin, _ = e.kv.insert(r.pin, r.pinEnd, hashes, upto, toks, bs, end)
	r.priv -= upto - r.pinEnd
	r.pinEnd = upto
}

// Release frees the KV a HoldKV request still holds (the decode engine pulled
// it, or the abort timeout fired). It reports whether r was holding KV.
func (e *Engine) Release(r *Request) bool {
	if !r.held {
		return false
	}
	r.held = false
	e.held--
	e.dropKV(r, e.drv.now())
	return true
}

// Snapshot reports the engine's live state.
func (e *Engine) Snapshot() Snapshot {
	s := Snapshot{
		Waiting: len(e.waiting) + e.transferring, Running: len(e.running),
		UsedBlocks: e.kv.used, CachedBlocks: e.kv.treeBlocks, NumGPUBlocks: e.Prof.NumGPUBlocks,
		BlockSize: e.Prof.BlockSize, PrefixQueries: e.prefixQueries, PrefixHits: e.prefixHits,
		PromptTokens: e.promptTokens, GenTokens: e.genTokens, Preemptions: e.preemptions,
		Finished: e.finished, Held: e.held,
	}
	if e.Prof.NumGPUBlocks > 0 {
		s.KVUsage = float64(e.kv.used-e.kv.treeBlocks+e.kv.refBlocks) / float64(e.Prof.NumGPUBlocks)
	}
	return s
}

// CachedPrefix reports how many leading tokens of prompt (hashes given or
// computed) the engine's prefix cache holds right now, without pinning.
func (e *Engine) CachedPrefix(prompt []uint32, hashes []uint64) int {
	if e.noKV {
		return 0
	}
	if hashes == nil {
		hashes = BlockHashes(prompt, e.Prof.BlockSize)
	}
	_, _, n := e.kv.match(hashes, len(hashes))
	return n * e.Prof.BlockSize
}

// step is the drivers' common loop body: finish the step in flight (if any)
// and plan the next; it returns the next step's end, or false when idle.
func (e *Engine) startStep(now int64) (int64, bool) {
	d, ok := e.plan(now)
	if !ok {
		e.busy = false
		return 0, false
	}
	e.stepStart = now
	e.stepEnd = now + d
	return e.stepEnd, true
}
