package prefill

import "sync"

// Index records which endpoints hold which block keys. Each endpoint has
// its own LRU with a hard capacity (the memory bound). One map from key to
// its holders (endpoint and LRU slot) serves both the match, which costs a
// lookup per matched block whatever the number of endpoints, and the
// per-endpoint LRU, which needs no map of its own.
type Index struct {
	mu         sync.RWMutex
	holders    map[uint64]holderSet
	eps        []*epLRU // by Endpoint.Index
	defaultCap int
	blocks     int // total entries over all endpoints
	// onEvict, when set, sees every entry leaving the index (LRU eviction,
	// Remove, Clear) with the aux value it was added with. Called under mu.
	onEvict func(ep int, key, aux uint64)
	// prefixClosed: whenever an endpoint holds a chain's key i it holds
	// keys 0..i−1 too. True for the approximate index (Add touches a
	// prefix head-last, so a chain's recency falls with depth and the LRU
	// evicts the deepest block first); it lets Match binary-search instead
	// of looking up every block. Event-fed indexes leave it false.
	prefixClosed bool
}

// holderRef is one endpoint holding a key, and where in its LRU.
type holderRef struct{ ep, slot int32 }

// holderSet keeps the first holder inline: most blocks have one, and a
// small map value keeps the index at ~130 bytes per block.
type holderSet struct {
	first holderRef
	n     int32
	more  *[]holderRef // holders after the first; nil while there is one
}

func (h *holderSet) at(i int) holderRef {
	if i == 0 {
		return h.first
	}
	return (*h.more)[i-1]
}

func (h *holderSet) find(ep int32) int {
	for i := 0; i < int(h.n); i++ {
		if h.at(i).ep == ep {
			return i
		}
	}
	return -1
}

func (h *holderSet) add(r holderRef) {
	switch {
	case h.n == 0:
		h.first = r
	case h.more == nil:
		m := []holderRef{r}
		h.more = &m
	default:
		*h.more = append(*h.more, r)
	}
	h.n++
}

func (h *holderSet) del(i int) {
	last := int(h.n) - 1
	if i != last {
		r := h.at(last)
		if i == 0 {
			h.first = r
		} else {
			(*h.more)[i-1] = r
		}
	}
	if last > 0 {
		*h.more = (*h.more)[:last-1]
		if len(*h.more) == 0 {
			h.more = nil
		}
	}
	h.n--
}

type epLRU struct {
	cap        int
	n          int
	nodes      []lruNode
	head, tail int32 // head is the most recently used; -1 when empty
	free       int32 // free-list head, -1 when none
}

type lruNode struct {
	key, aux   uint64
	prev, next int32
}

// NewIndex returns an index whose endpoints hold at most capacity keys
// each (SetCapacity overrides it per endpoint).
func NewIndex(capacity int) *Index {
	return &Index{holders: map[uint64]holderSet{}, defaultCap: max(capacity, 1)}
}

func newLRU(capacity int) *epLRU { return &epLRU{cap: capacity, head: -1, tail: -1, free: -1} }

func (x *Index) lru(ep int, create bool) *epLRU {
	if ep < 0 {
		return nil
	}
	if ep >= len(x.eps) {
		if !create {
			return nil
		}
		x.eps = append(x.eps, make([]*epLRU, ep+1-len(x.eps))...)
	}
	l := x.eps[ep]
	if l == nil && create {
		l = newLRU(x.defaultCap)
		x.eps[ep] = l
	}
	return l
}

// SetCapacity changes one endpoint's bound, evicting its oldest keys when
// it shrinks.
func (x *Index) SetCapacity(ep, capacity int) {
	capacity = max(capacity, 1)
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.lru(ep, true)
	if l.cap == capacity {
		return
	}
	l.cap = capacity
	for l.n > l.cap {
		x.remove(ep, l, l.tail)
	}
}

// Capacity returns an endpoint's bound.
func (x *Index) Capacity(ep int) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if l := x.lru(ep, false); l != nil {
		return l.cap
	}
	return x.defaultCap
}

// Add records keys on an endpoint. Callers pass a prefix's keys first to
// last; they are inserted back to front so that the first block ends most
// recent (the head of a prefix is what every later request needs, and the
// LRU then evicts a prefix's tail first). aux is kept with each entry for
// onEvict.
func (x *Index) Add(ep int, keys []uint64, aux []uint64) {
	if len(keys) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.lru(ep, true)
	for i := len(keys) - 1; i >= 0; i-- {
		var a uint64
		if aux != nil {
			a = aux[i]
		}
		x.add(ep, l, keys[i], a)
	}
}

func (x *Index) add(ep int, l *epLRU, key, aux uint64) {
	hs := x.holders[key]
	if i := hs.find(int32(ep)); i >= 0 {
		s := hs.at(i).slot
		l.nodes[s].aux = aux
		l.moveFront(s)
		return
	}
	if l.n >= l.cap {
		x.remove(ep, l, l.tail)
		hs = x.holders[key] // the eviction may have changed it
	}
	var s int32
	if l.free >= 0 {
		s = l.free
		l.free = l.nodes[s].next
	} else {
		s = int32(len(l.nodes))
		l.nodes = append(l.nodes, lruNode{})
	}
	l.nodes[s] = lruNode{key: key, aux: aux, prev: -1, next: l.head}
	if l.head >= 0 {
		l.nodes[l.head].prev = s
	}
	l.head = s
	if l.tail < 0 {
		l.tail = s
	}
	l.n++
	hs.add(holderRef{ep: int32(ep), slot: s})
	x.holders[key] = hs
	x.blocks++
}

func (l *epLRU) moveFront(s int32) {
	if l.head == s {
		return
	}
	n := &l.nodes[s]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	}
	if l.tail == s {
		l.tail = n.prev
	}
	n.prev, n.next = -1, l.head
	if l.head >= 0 {
		l.nodes[l.head].prev = s
	}
	l.head = s
	if l.tail < 0 {
		l.tail = s
	}
}

func (x *Index) remove(ep int, l *epLRU, s int32) {
	if s < 0 {
		return
	}
	n := l.nodes[s]
	if n.prev >= 0 {
		l.nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next >= 0 {
		l.nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
	l.nodes[s] = lruNode{next: l.free, prev: -1}
	l.free = s
	l.n--
	hs := x.holders[n.key]
	if i := hs.find(int32(ep)); i >= 0 {
		hs.del(i)
	}
	if hs.n == 0 {
		delete(x.holders, n.key)
	} else {
		x.holders[n.key] = hs
	}
	x.blocks--
	if x.onEvict != nil {
		x.onEvict(ep, n.key, n.aux)
	}
}

// Remove drops keys from an endpoint.
func (x *Index) Remove(ep int, keys []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.lru(ep, false)
	if l == nil {
		return
	}
	for _, k := range keys {
		hs := x.holders[k]
		if i := hs.find(int32(ep)); i >= 0 {
			x.remove(ep, l, hs.at(i).slot)
		}
	}
}

// Clear drops everything an endpoint holds (engine restart, lost events,
// endpoint removed).
func (x *Index) Clear(ep int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.lru(ep, false)
	if l == nil {
		return
	}
	for l.head >= 0 {
		x.remove(ep, l, l.head)
	}
	x.eps[ep] = newLRU(l.cap)
}

// Drop forgets an endpoint entirely (its index slot may be reused by a new
// endpoint).
func (x *Index) Drop(ep int) {
	x.Clear(ep)
	x.mu.Lock()
	if ep >= 0 && ep < len(x.eps) {
		x.eps[ep] = nil
	}
	x.mu.Unlock()
}

// Has reports whether an endpoint holds a key.
func (x *Index) Has(ep int, key uint64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	hs := x.holders[key]
	return hs.find(int32(ep)) >= 0
}

// Len returns how many keys an endpoint holds.
func (x *Index) Len(ep int) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if l := x.lru(ep, false); l != nil {
		return l.n
	}
	return 0
}

// Blocks returns the number of entries over all endpoints.
func (x *Index) Blocks() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.blocks
}

// Match writes into out[e] the number of consecutive leading keys endpoint
// e holds, for every e < len(out); out must be zeroed. It stops at the
// first key no endpoint still matching holds.
func (x *Index) Match(keys []uint64, out []int32) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.prefixClosed {
		x.matchClosed(keys, out)
		return
	}
	for i, k := range keys {
		hs := x.holders[k]
		alive := 0
		for j := 0; j < int(hs.n); j++ {
			h := hs.at(j).ep
			if int(h) < len(out) && out[h] == int32(i) {
				out[h] = int32(i + 1)
				alive++
			}
		}
		if alive == 0 {
			return
		}
	}
}

// matchClosed is Match for a prefix-closed index: holders of key i are a
// subset of the holders of key i−1, so "every endpoint still matching
// holds key j" is holders(key j) == holders(alive), monotone in j. Each run
// of equal holder sets costs one binary search: O(log n) lookups per
// distinct match length instead of one per block.
func (x *Index) matchClosed(keys []uint64, out []int32) {
	n := len(keys)
	if n == 0 {
		return
	}
	alive := x.holders[keys[0]]
	pos := 0 // every alive endpoint holds keys[0..pos]
	for alive.n > 0 {
		lo, hi := pos, n-1
		for lo < hi {
			mid := int(uint(lo+hi+1) >> 1)
			if x.holders[keys[mid]].n == alive.n {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		pos = lo
		if pos == n-1 {
			for j := 0; j < int(alive.n); j++ {
				if e := alive.at(j).ep; int(e) < len(out) {
					out[e] = int32(n)
				}
			}
			return
		}
		next := x.holders[keys[pos+1]]
		for j := 0; j < int(alive.n); j++ {
			if e := alive.at(j).ep; int(e) < len(out) && next.find(e) < 0 {
				out[e] = int32(pos + 1)
			}
		}
		alive = next
		pos++
	}
}

// SetPrefixClosed declares that callers only ever add whole prefixes
// (see Index.prefixClosed). Call before use.
func (x *Index) SetPrefixClosed(on bool) { x.prefixClosed = on }
