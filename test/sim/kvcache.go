package sim

// kvCache is the engine's KV store: capacity in blocks, a prefix cache kept as
// a radix tree over chained block hashes, and LRU eviction of unreferenced
// blocks.
//
// Nodes view the callers' BlockHashes arrays (never copied, never written).
// The tree is run-length: a node holds a run of consecutive block hashes, so
// matching a 70k-token prompt is one pass of uint64 compares and pinning,
// unpinning and evicting cost O(tree depth), not O(blocks). A request pins
// only its deepest node; ancestors are protected because only leaves are
// evictable. Eviction takes tail blocks of the least-recently-used
// unreferenced leaf, which is vLLM's order (a sequence's blocks are freed in
// reverse, so its tail goes first) and keeps the cache prefix-closed.
type kvCache struct {
	root       kvNode
	capacity   int
	used       int // tree blocks + private blocks of requests
	treeBlocks int
	refBlocks  int       // tree blocks on a pinned path (vLLM counts these as used)
	heap       []*kvNode // evictable leaves, min-heap on lastUse
	onStore    func(parent uint64, hasParent bool, hashes []uint64, firstBlock int, tokens []uint32)
	onRemove   func(hashes []uint64)
}

type kvNode struct {
	parent   *kvNode
	hashes   []uint64
	children map[uint64]*kvNode
	ref      int32 // pins on this node
	sub      int32 // pins in this subtree
	heapIdx  int32
	depth    int // blocks before this node
	lastUse  int64
}

func newKVCache(capacity int) *kvCache {
	c := &kvCache{capacity: capacity}
	c.root.heapIdx = -1
	return c
}

func (c *kvCache) free() int { return c.capacity - c.used }

// match returns the deepest node on the longest cached prefix of hashes (at
// most max blocks), how many of that node's hashes matched, and the total.
func (c *kvCache) match(hashes []uint64, max int) (*kvNode, int, int) {
	if max > len(hashes) {
		max = len(hashes)
	}
	cur, off, n := &c.root, 0, 0
	for n < max {
		child := cur.children[hashes[n]]
		if child == nil {
			break
		}
		k := runMatch(child.hashes, hashes[n:max])
		cur, off, n = child, k, n+k
		if k < len(child.hashes) {
			break
		}
	}
	return cur, off, n
}

// runMatch is the length of the common prefix of a node's run and q, whose
// first elements are known equal. Block hashes are chained (equal at block i
// ⇒ equal at every earlier block), so the match is monotone along the run:
// check the far end, else binary-search the boundary. O(log run).
func runMatch(run, q []uint64) int {
	m := len(run)
	if len(q) < m {
		m = len(q)
	}
	if run[m-1] == q[m-1] {
		return m
	}
	lo, hi := 1, m-1 // run[:lo] matches; run[hi] does not
	for lo < hi {
		mid := (lo + hi) / 2
		if run[mid] == q[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// split cuts n after k hashes and returns the new prefix node.
func (c *kvCache) split(n *kvNode, k int) *kvNode {
	p := &kvNode{parent: n.parent, hashes: n.hashes[:k:k], heapIdx: -1, depth: n.depth, lastUse: n.lastUse, sub: n.sub}
	p.children = map[uint64]*kvNode{n.hashes[k]: n}
	n.parent.children[p.hashes[0]] = p
	n.hashes = n.hashes[k:]
	n.parent = p
	n.depth += k
	return p
}

// pin finds the longest cached prefix (≤ max blocks) and pins it; it returns
// the pinned node and the number of blocks hit.
func (c *kvCache) pin(hashes []uint64, max int) (*kvNode, int) {
	n, off, hit := c.match(hashes, max)
	if n == &c.root {
		return n, 0
	}
	if off < len(n.hashes) {
		n = c.split(n, off)
	}
	c.addRef(n, 1)
	return n, hit
}

// unpin drops a request's pin and marks its path used at now.
func (c *kvCache) unpin(n *kvNode, now int64) {
	if n == nil || n == &c.root {
		return
	}
	c.addRef(n, -1)
	for p := n; p != &c.root; p = p.parent {
		p.lastUse = now
		if p.heapIdx >= 0 {
			c.heapFix(int(p.heapIdx))
		}
	}
	c.fix(n)
}

// unpinQuiet drops a pin without marking the path used.
func (c *kvCache) unpinQuiet(n *kvNode) {
	if n != nil && n != &c.root {
		c.addRef(n, -1)
	}
}

// insert extends the tree below pinned node pin (holding the first pinEnd
// blocks of hashes) with hashes[pinEnd:upto], moves the pin to the new deepest
// node and returns it with the number of those blocks that were already
// cached (duplicates the caller frees). tokens, when non-nil, are the
// sequence's tokens, for BlockStored events.
func (c *kvCache) insert(pin *kvNode, pinEnd int, hashes []uint64, upto int, tokens []uint32, bs int, now int64) (*kvNode, int) {
	cur, i, dup := pin, pinEnd, 0
	for i < upto {
		if child := cur.children[hashes[i]]; child != nil {
			k := runMatch(child.hashes, hashes[i:upto])
			if k < len(child.hashes) {
				child = c.split(child, k)
			}
			cur, i, dup = child, i+k, dup+k
			continue
		}
		if c.onStore != nil {
			var parent uint64
			if i > 0 {
				parent = hashes[i-1]
			}
			c.onStore(parent, i > 0, hashes[i:upto], i, tokens)
		}
		c.treeBlocks += upto - i
		if cur == pin && cur != &c.root && cur.ref == 1 && len(cur.children) == 0 {
			if len(cur.hashes) > 0 && &cur.hashes[0] == &hashes[cur.depth] {
				// the node already views this request's hash array: extend the view
				cur.hashes = hashes[cur.depth:upto:upto]
			} else {
				cur.hashes = append(cur.hashes, hashes[i:upto]...)
			}
			c.refBlocks += upto - i
		} else {
			nn := &kvNode{parent: cur, hashes: hashes[i:upto:upto], heapIdx: -1, depth: i, lastUse: now}
			if cur.children == nil {
				cur.children = make(map[uint64]*kvNode, 1)
			}
			cur.children[hashes[i]] = nn
			c.fix(cur)
			cur = nn
		}
		i = upto
	}
	if cur != pin {
		c.addRef(cur, 1)
		if pin != &c.root {
			c.addRef(pin, -1)
		}
	}
	c.used -= dup
	return cur, dup
}

// alloc reserves k blocks, evicting unreferenced cached blocks as needed.
func (c *kvCache) alloc(k int) bool {
	if k <= 0 {
		return true
	}
	if c.free() < k {
		c.evict(k - c.free())
		if c.free() < k {
			return false
		}
	}
	c.used += k
	return true
}

func (c *kvCache) release(k int) { c.used -= k }

// evict frees up to need blocks from LRU unreferenced leaves.
func (c *kvCache) evict(need int) {
	for need > 0 && len(c.heap) > 0 {
		n := c.heap[0]
		k := len(n.hashes)
		if k > need {
			k = need
		}
		cut := len(n.hashes) - k
		if c.onRemove != nil {
			c.onRemove(n.hashes[cut:])
		}
		n.hashes = n.hashes[:cut:cut]
		c.used -= k
		c.treeBlocks -= k
		need -= k
		if cut == 0 {
			c.heapRemove(0)
			p := n.parent
			for h, ch := range p.children {
				if ch == n {
					delete(p.children, h)
					break
				}
			}
			n.parent = nil
			c.fix(p)
		}
	}
}

// clear drops every unreferenced cached block.
func (c *kvCache) clear() { c.evict(c.capacity) }

// addRef changes n's pin count by d, keeping subtree counts and refBlocks.
func (c *kvCache) addRef(n *kvNode, d int32) {
	n.ref += d
	for p := n; p != &c.root; p = p.parent {
		before := p.sub
		p.sub += d
		if before == 0 && p.sub > 0 {
			c.refBlocks += len(p.hashes)
		} else if before > 0 && p.sub == 0 {
			c.refBlocks -= len(p.hashes)
		}
	}
	c.fix(n)
}

func (c *kvCache) fix(n *kvNode) {
	if n == &c.root || n.parent == nil {
		return
	}
	ev := n.ref == 0 && len(n.children) == 0
	switch {
	case ev && n.heapIdx < 0:
		n.heapIdx = int32(len(c.heap))
		c.heap = append(c.heap, n)
		c.up(len(c.heap) - 1)
	case !ev && n.heapIdx >= 0:
		c.heapRemove(int(n.heapIdx))
	case ev:
		c.heapFix(int(n.heapIdx))
	}
}

func (c *kvCache) less(i, j int) bool { return c.heap[i].lastUse < c.heap[j].lastUse }
func (c *kvCache) swap(i, j int) {
	c.heap[i], c.heap[j] = c.heap[j], c.heap[i]
	c.heap[i].heapIdx = int32(i)
	c.heap[j].heapIdx = int32(j)
}
func (c *kvCache) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !c.less(i, p) {
			break
		}
		c.swap(i, p)
		i = p
	}
}
func (c *kvCache) down(i int) bool {
	i0, n := i, len(c.heap)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && c.less(r, l) {
			j = r
		}
		if !c.less(j, i) {
			break
		}
		c.swap(i, j)
		i = j
	}
	return i > i0
}
func (c *kvCache) heapFix(i int) {
	if !c.down(i) {
		c.up(i)
	}
}
func (c *kvCache) heapRemove(i int) {
	last := len(c.heap) - 1
	n := c.heap[i]
	if i != last {
		c.swap(i, last)
	}
	c.heap = c.heap[:last]
	if i != last {
		c.heapFix(i)
	}
	n.heapIdx = -1
}
