package prefill

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/spillway-llm/spillway/profiles"
)

// PreciseType is the KV-event prefix producer's plugin type.
const PreciseType = "precise-prefix-cache-producer"

func init() { profiles.Register(PreciseType, newPrecise) }

// Endpoint labels that override the address templates per endpoint.
const (
	KVEventsEndpointLabel = "spillway.io/kv-events-endpoint"
	KVReplayEndpointLabel = "spillway.io/kv-replay-endpoint"
)

// PreciseParams are precise-prefix-cache-producer's parameters.
type PreciseParams struct {
	// BlockSize is the engines' KV block size (vLLM --block-size); events
	// of another size are counted as errors and ignored.
	BlockSize              int `json:"blockSize"`
	LRUCapacityPerServer   int `json:"lruCapacityPerServer"`
	MaxPrefixTokensToMatch int `json:"maxPrefixTokensToMatch"`
	MaxPrefixBlocksToMatch int `json:"maxPrefixBlocksToMatch"`
	// EndpointTemplate is the PUB address dialled per endpoint; {host},
	// {port}, {address} and {name} are the endpoint's. Ignored in bind mode.
	EndpointTemplate string `json:"endpointTemplate"`
	// ReplayEndpointTemplate is the engine's replay ROUTER ("" = no
	// replay: a sequence gap drops the endpoint's entries).
	ReplayEndpointTemplate string `json:"replayEndpointTemplate,omitempty"`
	// Bind, when set (e.g. "tcp://0.0.0.0:5557"), binds one SUB socket
	// that engines dial into; a message is attributed to the endpoint whose
	// address or name is one of its topic's '@'-separated fields (vLLM's
	// "kv@<host:port>@<model>" convention).
	Bind string `json:"bind,omitempty"`
	// Topic is the subscription prefix ("" = everything).
	Topic         string            `json:"topic,omitempty"`
	ReplayTimeout profiles.Duration `json:"replayTimeout"`
}

// PreciseProducer keeps a per-endpoint prefix index from the engines' own
// KV-cache events. Keys are computed from the events' token ids with the
// same chain as the request side, so the engines' opaque hashes are only
// used to resolve parents and removals.
type PreciseProducer struct {
	profiles.Named
	p        PreciseParams
	ctx      context.Context
	idx      *Index
	m        *prefixMetrics
	em       *kvEventMetrics
	stateKey string
	keysKey  string
	limit    int

	// applyMu serialises every index change and the per-publisher state.
	applyMu sync.Mutex
	pubs    map[int]*publisher // by Endpoint.Index
	// loras holds the LoRA names seen in events; read on the pick path
	// without applyMu (a replay may hold that for replayTimeout).
	loras sync.Map
	// lastWatched is the endpoint slice most recently found fully watched:
	// the lister hands the same slice until the pool changes, so the pick
	// path skips the per-endpoint check.
	lastWatched atomic.Pointer[*profiles.Endpoint]
	lastLen     atomic.Int64

	watchMu sync.Mutex
	watches map[*profiles.Endpoint]context.CancelFunc
	known   map[string]*profiles.Endpoint // bind mode: address and name → endpoint
	started bool
}

type publisher struct {
	ep      *profiles.Endpoint
	haveSeq bool
	seq     uint64
	engine  map[uint64]uint64 // engine block hash → our key
}

func newPrecise(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := PreciseParams{BlockSize: 16, LRUCapacityPerServer: 262144, MaxPrefixTokensToMatch: 131072, MaxPrefixBlocksToMatch: 2048,
		EndpointTemplate: "tcp://{host}:5557", ReplayTimeout: profiles.Duration(2 * time.Second)}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	switch {
	case p.BlockSize < 1:
		return nil, fmt.Errorf("blockSize must be ≥ 1, got %d", p.BlockSize)
	case p.LRUCapacityPerServer < 1:
		return nil, fmt.Errorf("lruCapacityPerServer must be ≥ 1, got %d", p.LRUCapacityPerServer)
	case p.MaxPrefixTokensToMatch < 0 || p.MaxPrefixBlocksToMatch < 0:
		return nil, fmt.Errorf("maxPrefixTokensToMatch and maxPrefixBlocksToMatch must be ≥ 0 (0 = no limit)")
	case p.Bind == "" && !strings.HasPrefix(p.EndpointTemplate, "tcp://"):
		return nil, fmt.Errorf("endpointTemplate %q must be a tcp:// address (e.g. tcp://{host}:5557)", p.EndpointTemplate)
	case p.Bind != "" && !strings.HasPrefix(p.Bind, "tcp://"):
		return nil, fmt.Errorf("bind %q must be a tcp:// address (e.g. tcp://0.0.0.0:5557)", p.Bind)
	case p.ReplayEndpointTemplate != "" && !strings.HasPrefix(p.ReplayEndpointTemplate, "tcp://"):
		return nil, fmt.Errorf("replayEndpointTemplate %q must be a tcp:// address", p.ReplayEndpointTemplate)
	case p.ReplayTimeout.Std() <= 0:
		return nil, fmt.Errorf("replayTimeout must be > 0")
	}
	return NewPreciseProducer(name, p, h)
}

// NewPreciseProducer builds the producer; in bind mode it binds now.
func NewPreciseProducer(name string, p PreciseParams, h profiles.Handle) (*PreciseProducer, error) {
	pp := &PreciseProducer{Named: profiles.NewNamed(PreciseType, name), p: p, ctx: h.Context(),
		idx: NewIndex(p.LRUCapacityPerServer), pubs: map[int]*publisher{},
		watches: map[*profiles.Endpoint]context.CancelFunc{}, known: map[string]*profiles.Endpoint{}}
	pp.TN.Type = PreciseType
	pp.m = newPrefixMetrics(h.Registerer(), pp.TN.Name)
	pp.em = newKVEventMetrics(h.Registerer())
	pp.stateKey = matchKeyOf(pp.TN.Name)
	pp.limit = maxBlocks(p.BlockSize, p.MaxPrefixTokensToMatch, p.MaxPrefixBlocksToMatch)
	pp.keysKey = "prefill/precise-keys/" + itoa(p.BlockSize) + "/" + itoa(pp.limit)
	pp.idx.onEvict = pp.evicted
	if p.Bind != "" {
		sub := zmq4.NewSub(pp.ctx)
		if err := sub.Listen(p.Bind); err != nil {
			sub.Close()
			return nil, fmt.Errorf("bind %s: %w", p.Bind, err)
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, p.Topic); err != nil {
			sub.Close()
			return nil, fmt.Errorf("subscribe: %w", err)
		}
		pp.started = true
		go pp.recvLoop(pp.ctx, sub, nil)
		if a := sub.Addr(); a != nil {
			pp.p.Bind = "tcp://" + a.String()
		}
	}
	return pp, nil
}

// Params implements profiles.Parameterized.
func (pp *PreciseProducer) Params() any { return pp.p }

// Order implements profiles.ProducerOrder.
func (pp *PreciseProducer) Order() int { return 20 }

// Index exposes the index (tests).
func (pp *PreciseProducer) Index() *Index { return pp.idx }

// BindAddr is the bound SUB address in bind mode ("" otherwise).
func (pp *PreciseProducer) BindAddr() string {
	if pp.p.Bind == "" {
		return ""
	}
	return pp.p.Bind
}

// Describe implements profiles.Describer.
func (pp *PreciseProducer) Describe() []string {
	src := "dials " + pp.p.EndpointTemplate + " per endpoint"
	if pp.p.Bind != "" {
		src = "binds " + pp.p.Bind + " (engines dial in)"
	}
	rep := "sequence gaps drop the endpoint's entries (no replay endpoint)"
	if pp.p.ReplayEndpointTemplate != "" {
		rep = "sequence gaps replay from " + pp.p.ReplayEndpointTemplate
	}
	return []string{src, rep, fmt.Sprintf("matches at most %d blocks of %d tokens; index bound %d blocks per endpoint", pp.limit, pp.p.BlockSize, pp.p.LRUCapacityPerServer)}
}

// seed is the chain root on both sides: engines key blocks per LoRA
// adapter, and a request addresses an adapter by its model name.
func (pp *PreciseProducer) seedFor(lora string) uint64 { return Seed(lora, "") }

// requestSeed: the model is a LoRA seen in events → that adapter's chain;
// else the base chain. A cache salt never matches (engines do not
// publish it), which under-estimates rather than over-estimates hits.
func (pp *PreciseProducer) requestSeed(req *profiles.Request) uint64 {
	if req.CacheSalt != "" {
		return Seed("\x00salted", req.CacheSalt)
	}
	if _, lora := pp.loras.Load(req.Model); lora {
		return pp.seedFor(req.Model)
	}
	return pp.seedFor("")
}

// Produce implements profiles.Producer.
func (pp *PreciseProducer) Produce(_ context.Context, req *profiles.Request, eps []*profiles.Endpoint) error {
	pp.ensureWatched(eps)
	seed := pp.requestSeed(req)
	rk, _ := req.Get(pp.keysKey).(*RequestKeys)
	if rk == nil || rk.Seed != seed {
		ids, pt := RequestIDs(req)
		rk = &RequestKeys{Seed: seed, BlockSize: pp.p.BlockSize, MaxBlocks: pp.limit, PromptTokens: pt,
			Keys: ChainKeys(nil, seed, ids, pp.p.BlockSize, pp.limit)}
		req.Put(pp.keysKey, rk)
	}
	m := &Match{Producer: pp.TN.Name, BlockSize: pp.p.BlockSize, TotalBlocks: len(rk.Keys), PromptTokens: rk.PromptTokens}
	m.matched = make([]int32, maxIndex(eps)+1)
	if len(rk.Keys) > 0 {
		pp.idx.Match(rk.Keys, m.matched)
		best := int32(0)
		for _, e := range eps {
			best = max(best, m.matched[e.Index])
		}
		pp.m.lookups.Add(float64(len(rk.Keys)))
		pp.m.hits.Add(float64(best))
	}
	storeMatch(req, pp.stateKey, m)
	return nil
}

// OnEndpointAdded implements profiles.EndpointsHook: start watching.
func (pp *PreciseProducer) OnEndpointAdded(ep *profiles.Endpoint) {
	pp.ensureWatched([]*profiles.Endpoint{ep})
}

// OnEndpointRemoved implements profiles.EndpointsHook: stop watching and
// forget its blocks.
func (pp *PreciseProducer) OnEndpointRemoved(ep *profiles.Endpoint) {
	pp.lastWatched.Store(nil)
	pp.watchMu.Lock()
	if c := pp.watches[ep]; c != nil {
		c()
	}
	delete(pp.watches, ep)
	if pp.known[ep.Address] == ep {
		delete(pp.known, ep.Address)
	}
	if pp.known[ep.Name] == ep {
		delete(pp.known, ep.Name)
	}
	pp.watchMu.Unlock()
	pp.applyMu.Lock()
	if pub := pp.pubs[ep.Index]; pub != nil && pub.ep == ep {
		delete(pp.pubs, ep.Index)
	}
	pp.idx.Drop(ep.Index)
	pp.m.blocks.Set(float64(pp.idx.Blocks()))
	pp.applyMu.Unlock()
}

func (pp *PreciseProducer) ensureWatched(eps []*profiles.Endpoint) {
	if len(eps) == 0 || (pp.lastWatched.Load() == &eps[0] && pp.lastLen.Load() == int64(len(eps))) {
		return
	}
	pp.watchMu.Lock()
	defer pp.watchMu.Unlock()
	defer func() { pp.lastWatched.Store(&eps[0]); pp.lastLen.Store(int64(len(eps))) }()
	for _, ep := range eps {
		if _, ok := pp.watches[ep]; ok {
			continue
		}
		pp.known[ep.Address] = ep
		pp.known[ep.Name] = ep
		if pp.p.Bind != "" {
			pp.watches[ep] = func() {}
			continue
		}
		ctx, cancel := context.WithCancel(pp.ctx)
		pp.watches[ep] = cancel
		go pp.watch(ctx, ep)
	}
}

func expand(tmpl string, ep *profiles.Endpoint) string {
	host, port, err := net.SplitHostPort(ep.Address)
	if err != nil {
		host = ep.Address
	}
	return strings.NewReplacer("{host}", host, "{port}", port, "{address}", ep.Address, "{name}", ep.Name).Replace(tmpl)
}

func (pp *PreciseProducer) eventsAddr(ep *profiles.Endpoint) string {
	if a := ep.Labels[KVEventsEndpointLabel]; a != "" {
		return a
	}
	return expand(pp.p.EndpointTemplate, ep)
}

func (pp *PreciseProducer) replayAddr(ep *profiles.Endpoint) string {
	if a := ep.Labels[KVReplayEndpointLabel]; a != "" {
		return a
	}
	if pp.p.ReplayEndpointTemplate == "" {
		return ""
	}
	return expand(pp.p.ReplayEndpointTemplate, ep)
}

// watch dials one engine's PUB (retrying forever, reconnecting) and applies
// its events until ctx ends.
func (pp *PreciseProducer) watch(ctx context.Context, ep *profiles.Endpoint) {
	sub := zmq4.NewSub(ctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true), zmq4.WithDialerRetry(250*time.Millisecond))
	if err := sub.SetOption(zmq4.OptionSubscribe, pp.p.Topic); err != nil {
		sub.Close()
		return
	}
	if err := sub.Dial(pp.eventsAddr(ep)); err != nil {
		sub.Close()
		return // only when ctx is done: retries are unlimited
	}
	pp.recvLoop(ctx, sub, ep)
}

func (pp *PreciseProducer) recvLoop(ctx context.Context, sub zmq4.Socket, ep *profiles.Endpoint) {
	defer sub.Close()
	for {
		msg, err := sub.Recv()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Disconnected: the socket reconnects; do not spin.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		target := ep
		if target == nil {
			target = pp.byTopic(msg.Frames)
			if target == nil {
				pp.em.decodeE.WithLabelValues(pp.TN.Name, "", "unknown_topic").Inc()
				continue
			}
		}
		pp.handle(target, msg.Frames)
	}
}

func (pp *PreciseProducer) byTopic(frames [][]byte) *profiles.Endpoint {
	if len(frames) < 3 {
		return nil
	}
	pp.watchMu.Lock()
	defer pp.watchMu.Unlock()
	for _, f := range strings.Split(string(frames[0]), "@") {
		if ep := pp.known[f]; ep != nil {
			return ep
		}
	}
	return nil
}

// handle applies one [topic, seq, payload] message with sequence tracking.
func (pp *PreciseProducer) handle(ep *profiles.Endpoint, frames [][]byte) {
	if len(frames) < 2 {
		pp.em.decodeE.WithLabelValues(pp.TN.Name, ep.Name, "frames").Inc()
		return
	}
	seqF, payload := frames[len(frames)-2], frames[len(frames)-1]
	if len(seqF) != 8 {
		pp.em.decodeE.WithLabelValues(pp.TN.Name, ep.Name, "seq").Inc()
		return
	}
	seq := binary.BigEndian.Uint64(seqF)
	batch, err := DecodeKVEventBatch(payload)
	if err != nil {
		pp.em.decodeE.WithLabelValues(pp.TN.Name, ep.Name, "decode").Inc()
		return
	}
	pp.applyMu.Lock()
	defer pp.applyMu.Unlock()
	pub := pp.publisher(ep)
	switch {
	case !pub.haveSeq || seq == pub.seq+1:
	case seq <= pub.seq:
		// The sequence went back: the engine restarted and its cache is
		// empty; whatever we hold for it is stale.
		pp.em.gaps.WithLabelValues(pp.TN.Name, ep.Name, "reset").Inc()
		pp.clear(pub)
	default:
		if !pp.replay(pub, seq) {
			pp.em.gaps.WithLabelValues(pp.TN.Name, ep.Name, "dropped").Inc()
			pp.clear(pub)
		} else {
			pp.em.gaps.WithLabelValues(pp.TN.Name, ep.Name, "replayed").Inc()
		}
		if pub.haveSeq && seq <= pub.seq {
			return // the replay already delivered it
		}
	}
	pp.apply(pub, batch)
	pub.haveSeq, pub.seq = true, seq
	pp.m.blocks.Set(float64(pp.idx.Blocks()))
}

func (pp *PreciseProducer) publisher(ep *profiles.Endpoint) *publisher {
	pub := pp.pubs[ep.Index]
	if pub == nil || pub.ep != ep {
		if pub != nil {
			pp.idx.Clear(ep.Index)
		}
		pub = &publisher{ep: ep, engine: map[uint64]uint64{}}
		pp.pubs[ep.Index] = pub
		if pp.p.LRUCapacityPerServer > 0 {
			pp.idx.SetCapacity(ep.Index, pp.p.LRUCapacityPerServer)
		}
	}
	return pub
}

func (pp *PreciseProducer) clear(pub *publisher) {
	pp.idx.Clear(pub.ep.Index)
	pub.engine = map[uint64]uint64{}
}

// evicted keeps the engine-hash map as bounded as the index (called with
// applyMu held: every index change happens under it).
func (pp *PreciseProducer) evicted(ep int, key, aux uint64) {
	if pub := pp.pubs[ep]; pub != nil {
		if k, ok := pub.engine[aux]; ok && k == key {
			delete(pub.engine, aux)
		}
	}
}

// replay asks the engine's replay ROUTER for everything after pub.seq and
// applies it; false when no replay endpoint is configured or it could not
// close the gap.
func (pp *PreciseProducer) replay(pub *publisher, upTo uint64) bool {
	addr := pp.replayAddr(pub.ep)
	if addr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(pp.ctx, pp.p.ReplayTimeout.Std())
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithDialerMaxRetries(3), zmq4.WithDialerRetry(50*time.Millisecond))
	defer d.Close()
	if err := d.Dial(addr); err != nil {
		return false
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], pub.seq+1)
	if err := d.Send(zmq4.NewMsgFrom(nil, start[:])); err != nil {
		return false
	}
	type res struct {
		m   zmq4.Msg
		err error
	}
	for n := 0; n < 1_000_000; n++ {
		ch := make(chan res, 1)
		go func() { m, err := d.Recv(); ch <- res{m, err} }()
		var r res
		select {
		case r = <-ch:
		case <-ctx.Done():
			d.Close()
			return false
		}
		if r.err != nil || len(r.m.Frames) < 2 {
			return false
		}
		payload := r.m.Frames[len(r.m.Frames)-1]
		seqF := r.m.Frames[len(r.m.Frames)-2]
		if len(payload) == 0 {
			return pub.haveSeq && pub.seq+1 >= upTo // sentinel
		}
		if len(seqF) != 8 {
			return false
		}
		seq := binary.BigEndian.Uint64(seqF)
		if seq <= pub.seq {
			continue
		}
		if seq != pub.seq+1 {
			return false // the replay buffer no longer reaches back far enough
		}
		b, err := DecodeKVEventBatch(payload)
		if err != nil {
			return false
		}
		pp.apply(pub, b)
		pub.seq = seq
		if seq+1 >= upTo {
			// Drain the rest (up to the sentinel) is unnecessary: the live
			// stream carries them.
			return true
		}
	}
	return false
}

// apply applies a batch's events to pub's endpoint (applyMu held).
func (pp *PreciseProducer) apply(pub *publisher, b KVEventBatch) {
	ep := pub.ep
	for _, ev := range b.Events {
		switch ev.Type {
		case "AllBlocksCleared":
			pp.clear(pub)
		case "BlockRemoved":
			keys := make([]uint64, 0, len(ev.BlockHashes))
			for _, h := range ev.BlockHashes {
				if k, ok := pub.engine[h]; ok {
					keys = append(keys, k)
					delete(pub.engine, h)
				}
			}
			pp.idx.Remove(ep.Index, keys)
		case "BlockStored":
			pp.store(pub, ev)
		}
		pp.em.events.WithLabelValues(pp.TN.Name, ep.Name, ev.Type).Inc()
	}
}

func (pp *PreciseProducer) store(pub *publisher, ev KVEvent) {
	bs := ev.BlockSize
	if bs == 0 {
		bs = pp.p.BlockSize
	}
	if bs != pp.p.BlockSize || len(ev.TokenIDs) != bs*len(ev.BlockHashes) {
		pp.em.decodeE.WithLabelValues(pp.TN.Name, pub.ep.Name, "block_size").Inc()
		return
	}
	if ev.LoRAName != "" {
		pp.loras.Store(ev.LoRAName, true)
	}
	parent := pp.seedFor(ev.LoRAName)
	if ev.ParentBlockHash != nil {
		k, ok := pub.engine[*ev.ParentBlockHash]
		if !ok {
			// Parent unknown (evicted, or stored before we subscribed):
			// our chain cannot be continued, and these blocks are
			// unreachable by a match from the start anyway.
			pp.em.decodeE.WithLabelValues(pp.TN.Name, pub.ep.Name, "unknown_parent").Inc()
			return
		}
		parent = k
	}
	keys := make([]uint64, len(ev.BlockHashes))
	for i := range keys {
		parent = chainBlock(parent, ev.TokenIDs[i*bs:(i+1)*bs])
		keys[i] = parent
	}
	pp.idx.Add(pub.ep.Index, keys, ev.BlockHashes)
	for i, h := range ev.BlockHashes {
		if pp.idx.Has(pub.ep.Index, keys[i]) {
			pub.engine[h] = keys[i]
		}
	}
	// The engine map follows the index through evictions; this bounds it
	// even if engines reuse hashes for different keys.
	if len(pub.engine) > 2*pp.idx.Capacity(pub.ep.Index) {
		pp.clear(pub)
	}
}

// SeqOf returns the last sequence number applied for an endpoint (tests).
func (pp *PreciseProducer) SeqOf(ep *profiles.Endpoint) (uint64, bool) {
	pp.applyMu.Lock()
	defer pp.applyMu.Unlock()
	if pub := pp.pubs[ep.Index]; pub != nil && pub.ep == ep {
		return pub.seq, pub.haveSeq
	}
	return 0, false
}

// Seed returns the chain root the producer uses for a LoRA adapter ("" =
// base model): what an event's blocks are keyed from (tests).
func (pp *PreciseProducer) Seed(lora string) uint64 { return pp.seedFor(lora) }
