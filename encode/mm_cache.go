package encode

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/spillway-llm/spillway/profiles"
)

// Plugin types of the encoder-cache affinity pair.
const (
	MMCacheProducerType = "mm-embeddings-cache-producer"
	MMCacheScorerType   = "mm-embeddings-cache-scorer"
)

func init() {
	profiles.Register(MMCacheProducerType, newMMCacheProducer)
	profiles.Register(MMCacheScorerType, newMMCacheScorer)
}

type mmCacheParams struct {
	// CacheSizeInMBPerServer bounds what is remembered per encoder, in MB
	// of embeddings (each item costs its token count × embeddingBytesPerToken).
	CacheSizeInMBPerServer int `json:"cacheSizeInMBPerServer"`
	// EmbeddingBytesPerToken is the size of one item token's embedding:
	// hidden size × bytes per element (5120 × 2 for a bf16 32B VL model).
	EmbeddingBytesPerToken int `json:"embeddingBytesPerToken"`
	// DefaultItemTokens is the token cost of an item the token producer did
	// not count.
	DefaultItemTokens int `json:"defaultItemTokens"`
	// EncodeProfile names the profile whose picks serve the items.
	EncodeProfile string `json:"encodeProfile"`
}

// MMCacheProducer remembers which encoder holds which multimodal item's
// embeddings. An item is identified by its content hash (the token
// producer's ImageTokens.Hash, else a 64-bit FNV-1a of the item's URL or
// data) and recorded against the ENCODER the encode profile picked for it,
// when the request is dispatched. Each encoder's memory is an LRU bounded by
// cacheSizeInMBPerServer; least recently used items are forgotten first,
// as the encoder's own cache would evict them.
type MMCacheProducer struct {
	profiles.Named
	p      mmCacheParams
	budget int64
	key    string

	mu   sync.RWMutex
	byEP map[*profiles.Endpoint]*lru
}

func newMMCacheProducer(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	p := mmCacheParams{CacheSizeInMBPerServer: 1024, EmbeddingBytesPerToken: 10240, DefaultItemTokens: 1024, EncodeProfile: "encode"}
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.CacheSizeInMBPerServer <= 0 {
		return nil, fmt.Errorf("cacheSizeInMBPerServer must be > 0, got %d", p.CacheSizeInMBPerServer)
	}
	if p.EmbeddingBytesPerToken <= 0 {
		return nil, fmt.Errorf("embeddingBytesPerToken must be > 0, got %d", p.EmbeddingBytesPerToken)
	}
	if p.DefaultItemTokens <= 0 {
		return nil, fmt.Errorf("defaultItemTokens must be > 0, got %d", p.DefaultItemTokens)
	}
	if p.EncodeProfile == "" {
		return nil, fmt.Errorf("encodeProfile must not be empty")
	}
	m := &MMCacheProducer{Named: profiles.NewNamed(MMCacheProducerType, name), p: p,
		budget: int64(p.CacheSizeInMBPerServer) << 20, byEP: map[*profiles.Endpoint]*lru{}}
	m.key = "encode.mm-hashes/" + m.TypedName().Name
	return m, nil
}

// Params implements profiles.Parameterized.
func (m *MMCacheProducer) Params() any { return m.p }

// Order implements profiles.ProducerOrder: after the token producer, whose
// per-image hashes it uses.
func (m *MMCacheProducer) Order() int { return 150 }

type itemInfo struct {
	hash uint64
	cost int64
}

// Produce implements profiles.Producer: it computes the items' content
// hashes once per request.
func (m *MMCacheProducer) Produce(_ context.Context, req *profiles.Request, _ []*profiles.Endpoint) error {
	if !req.HasMultimodal() {
		return nil
	}
	items := make([]itemInfo, len(req.Multimodal))
	for i, it := range req.Multimodal {
		tokens := m.p.DefaultItemTokens
		var h uint64
		if i < len(req.Tokens.Images) {
			h = req.Tokens.Images[i].Hash
			if t := req.Tokens.Images[i].Tokens; t > 0 {
				tokens = t
			}
		}
		if h == 0 {
			f := fnv.New64a()
			f.Write([]byte(it.Kind))
			f.Write([]byte{0})
			f.Write([]byte(it.URL))
			h = f.Sum64()
		}
		items[i] = itemInfo{hash: h, cost: int64(tokens) * int64(m.p.EmbeddingBytesPerToken)}
	}
	req.Put(m.key, items)
	return nil
}

func (m *MMCacheProducer) items(req *profiles.Request) []itemInfo {
	v, _ := req.Get(m.key).([]itemInfo)
	return v
}

// ItemHash returns the content hash of multimodal item i of req (0 when the
// producer has not run or i is out of range).
func (m *MMCacheProducer) ItemHash(req *profiles.Request, i int) uint64 {
	it := m.items(req)
	if i < 0 || i >= len(it) {
		return 0
	}
	return it[i].hash
}

// Holds reports whether encoder ep is believed to hold the embeddings of
// the item with this content hash.
func (m *MMCacheProducer) Holds(ep *profiles.Endpoint, hash uint64) bool {
	m.mu.RLock()
	l := m.byEP[ep]
	m.mu.RUnlock()
	return l != nil && l.has(hash)
}

// BytesHeld returns the embedding bytes remembered for ep.
func (m *MMCacheProducer) BytesHeld(ep *profiles.Endpoint) int64 {
	m.mu.RLock()
	l := m.byEP[ep]
	m.mu.RUnlock()
	if l == nil {
		return 0
	}
	return l.size()
}

// OnDispatch implements profiles.DispatchHook: each item is recorded on the
// encoder that serves it.
func (m *MMCacheProducer) OnDispatch(req *profiles.Request, res *profiles.Result) {
	items := m.items(req)
	pr := res.Profiles[m.p.EncodeProfile]
	if len(items) == 0 || pr == nil {
		return
	}
	targets := perItemTargets(req, pr)
	for i, it := range items {
		var ep *profiles.Endpoint
		switch {
		case len(targets) == len(items):
			ep = targets[i]
		case len(targets) > 0:
			ep = targets[0]
		}
		if ep == nil {
			continue
		}
		m.mu.Lock()
		l := m.byEP[ep]
		if l == nil {
			l = newLRU(m.budget)
			m.byEP[ep] = l
		}
		m.mu.Unlock()
		l.add(it.hash, it.cost)
	}
}

// OnEndpointAdded implements profiles.EndpointsHook.
func (m *MMCacheProducer) OnEndpointAdded(*profiles.Endpoint) {}

// OnEndpointRemoved implements profiles.EndpointsHook: a departed encoder's
// cache is gone with it.
func (m *MMCacheProducer) OnEndpointRemoved(ep *profiles.Endpoint) {
	m.mu.Lock()
	delete(m.byEP, ep)
	m.mu.Unlock()
}

// lru is one encoder's remembered items, bounded in bytes.
type lru struct {
	mu     sync.Mutex
	budget int64
	used   int64
	ll     *list.List // front = most recent; values are *lruEntry
	idx    map[uint64]*list.Element
}

type lruEntry struct {
	hash uint64
	cost int64
}

func newLRU(budget int64) *lru {
	return &lru{budget: budget, ll: list.New(), idx: map[uint64]*list.Element{}}
}

func (l *lru) has(h uint64) bool {
	l.mu.Lock()
	_, ok := l.idx[h]
	l.mu.Unlock()
	return ok
}

func (l *lru) size() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

func (l *lru) add(h uint64, cost int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cost > l.budget {
		return // would evict everything and still not fit
	}
	if e, ok := l.idx[h]; ok {
		l.ll.MoveToFront(e)
		return
	}
	for l.used+cost > l.budget {
		back := l.ll.Back()
		ent := back.Value.(*lruEntry)
		l.ll.Remove(back)
		delete(l.idx, ent.hash)
		l.used -= ent.cost
	}
	l.idx[h] = l.ll.PushFront(&lruEntry{hash: h, cost: cost})
	l.used += cost
}

type mmScorerParams struct {
	// ProducerName names the mm-embeddings-cache-producer to consult;
	// empty = the first one in the config.
	ProducerName string `json:"producerName,omitempty"`
}

// MMCacheScorer is encoder-cache affinity: while the encode profile places
// item i (profiles.EncodeItem), an encoder scores 1 when it holds item i's
// embeddings, else 0. Outside a per-item run it scores the fraction of the
// request's items the encoder holds.
type MMCacheScorer struct {
	profiles.Named
	p    mmScorerParams
	prod *MMCacheProducer
}

func newMMCacheScorer(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	var p mmScorerParams
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	return &MMCacheScorer{Named: profiles.NewNamed(MMCacheScorerType, name), p: p}, nil
}

// Params implements profiles.Parameterized.
func (s *MMCacheScorer) Params() any { return s.p }

// Bind implements profiles.Binder.
func (s *MMCacheScorer) Bind(h profiles.Handle) error {
	if s.p.ProducerName != "" {
		pl, ok := h.Plugin(s.p.ProducerName)
		if !ok {
			return fmt.Errorf("producerName %q names no plugin in the plugins list", s.p.ProducerName)
		}
		prod, ok := pl.(*MMCacheProducer)
		if !ok {
			return fmt.Errorf("producerName %q is a %s, not a %s", s.p.ProducerName, pl.TypedName().Type, MMCacheProducerType)
		}
		s.prod = prod
		return nil
	}
	for _, pl := range h.Plugins() {
		if prod, ok := pl.(*MMCacheProducer); ok {
			s.prod = prod
			return nil
		}
	}
	return fmt.Errorf("needs a %s plugin in the plugins list", MMCacheProducerType)
}

// Score implements profiles.Scorer.
func (s *MMCacheScorer) Score(_ context.Context, _ *profiles.CycleState, req *profiles.Request, eps []*profiles.Endpoint, out []float64) {
	items := s.prod.items(req)
	if len(items) == 0 {
		return
	}
	if i := profiles.EncodeItem(req); i >= 0 && i < len(items) {
		s.prod.mu.RLock()
		defer s.prod.mu.RUnlock()
		for j, e := range eps {
			if l := s.prod.byEP[e]; l != nil && l.has(items[i].hash) {
				out[j] = 1
			}
		}
		return
	}
	for j, e := range eps {
		n := 0
		for _, it := range items {
			if s.prod.Holds(e, it.hash) {
				n++
			}
		}
		out[j] = float64(n) / float64(len(items))
	}
}
