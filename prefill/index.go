package prefill

import "sync"

// Index records which endpoints hold which block keys. Each endpoint has
// its own LRU with a hard capacity (the memory bound); a reverse map from
// key to holders makes a match cost one lookup per matched block whatever
// the number of endpoints.
type Index struct {
	mu         sync.RWMutex
	holders    map[uint64][]int32 // key → Endpoint.Index of every holder
	eps        []*epLRU           // by Endpoint.Index
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

type epLRU struct {
	cap        int
	slot       map[uint64]int32
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
	return &Index{holders: map[uint64][]int32{}, defaultCap: max(capacity, 1)}
}

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
		l = &epLRU{cap: x.defaultCap, slot: map[uint64]int32{}, head: -1, tail: -1, free: -1}
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
	for len(l.slot) > l.cap {
		x.evictTail(ep, l)
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

// Add records keys on an endpoint in order (the last one becomes the most
// recent; callers pass a prefix's keys first to last, so a prefix's tail
// is evicted before its head). aux is kept with the entry for onEvict.
func (x *Index) Add(ep int, keys []uint64, aux []uint64) {
	if len(keys) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.lru(ep, true)
	// Insert back to front so that the first block ends most recent: the
	// head of a prefix is what every later request needs.
	for i := len(keys) - 1; i >= 0; i-- {
		var a uint64
		if aux != nil {
			a = aux[i]
		}
		x.add(ep, l, keys[i], a)
	}
}

func (x *Index) add(ep int, l *epLRU, key, aux uint64) {
	if s, ok := l.slot[key]; ok {
		l.nodes[s].aux = aux
		l.moveFront(s)
		return
	}
	if len(l.slot) >= l.cap {
		x.evictTail(ep, l)
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
	l.slot[key] = s
	x.holders[key] = append(x.holders[key], int32(ep))
	x.blocks++
}

func (l *epLRU) moveFront(s int32) {
	if l.head == s {
		return
	}
	n := &l.nodes[s]
	// unlink
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

func (x *Index) evictTail(ep int, l *epLRU) {
	if l.tail >= 0 {
		x.remove(ep, l, l.tail)
	}
}

func (x *Index) remove(ep int, l *epLRU, s int32) {
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
	delete(l.slot, n.key)
	l.nodes[s] = lruNode{next: l.free, prev: -1}
	l.free = s
	hs := x.holders[n.key]
	for i, h := range hs {
		if h == int32(ep) {
			hs[i] = hs[len(hs)-1]
			hs = hs[:len(hs)-1]
			break
		}
	}
	if len(hs) == 0 {
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
		if s, ok := l.slot[k]; ok {
			x.remove(ep, l, s)
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
	capacity := l.cap
	x.eps[ep] = &epLRU{cap: capacity, slot: map[uint64]int32{}, head: -1, tail: -1, free: -1}
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

// Has reports whether an endpoint holds a key (tests, debugging).
func (x *Index) Has(ep int, key uint64) bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	l := x.lru(ep, false)
	if l == nil {
		return false
	}
	_, ok := l.slot[key]
	return ok
}

// Len returns how many keys an endpoint holds.
func (x *Index) Len(ep int) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if l := x.lru(ep, false); l != nil {
		return len(l.slot)
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
		for _, h := range hs {
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
// holds key j" is len(holders[key j]) == len(alive), monotone in j. Each
// run of equal holder sets costs one binary search: O(log n) lookups per
// distinct match length instead of one per block.
func (x *Index) matchClosed(keys []uint64, out []int32) {
	n := len(keys)
	if n == 0 {
		return
	}
	alive := x.holders[keys[0]]
	pos := 0 // every alive endpoint holds keys[0..pos]
	for len(alive) > 0 {
		lo, hi := pos, n-1
		for lo < hi {
			mid := int(uint(lo+hi+1) >> 1)
			if len(x.holders[keys[mid]]) == len(alive) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		pos = lo
		if pos == n-1 {
			for _, e := range alive {
				if int(e) < len(out) {
					out[e] = int32(n)
				}
			}
			return
		}
		next := x.holders[keys[pos+1]]
		for _, e := range alive {
			if int(e) < len(out) && !containsInt32(next, e) {
				out[e] = int32(pos + 1)
			}
		}
		alive = next
		pos++
	}
}

func containsInt32(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// SetPrefixClosed declares that callers only ever add whole prefixes
// (see Index.prefixClosed). Call before use.
func (x *Index) SetPrefixClosed(on bool) { x.prefixClosed = on }
