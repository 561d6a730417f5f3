package sim

// KVEvent is one vLLM KV-cache event (protocols.md §5).
type KVEvent struct {
	Type            string // "BlockStored", "BlockRemoved", "AllBlocksCleared"
	BlockHashes     []uint64
	ParentBlockHash *uint64  // BlockStored: nil for a sequence's first block
	TokenIDs        []uint32 // BlockStored: the tokens of all stored blocks
	BlockSize       int
}

// EventBatch is what one engine step publishes.
type EventBatch struct {
	TS     float64 // simulated unix seconds
	Events []KVEvent
	DPRank int
}

// KVEventSink receives an engine's event batches (on the engine goroutine;
// copy what you keep). The ZMQ publisher is one; an in-process prefix index
// can be another.
type KVEventSink func(endpoint string, b EventBatch)

type eventBuffer struct {
	sink KVEventSink
	evs  []KVEvent
}

// SetEventSink turns KV events on for e (nil turns them off).
func (e *Engine) SetEventSink(sink KVEventSink) {
	if sink == nil {
		e.events = nil
		e.kv.onStore, e.kv.onRemove = nil, nil
		return
	}
	e.events = &eventBuffer{sink: sink}
	bs := e.Prof.BlockSize
	e.kv.onStore = func(parent uint64, hasParent bool, hashes []uint64, first int, tokens []uint32) {
		ev := KVEvent{Type: "BlockStored", BlockHashes: append([]uint64(nil), hashes...), BlockSize: bs}
		if hasParent {
			p := parent
			ev.ParentBlockHash = &p
		}
		if tokens != nil && (first+len(hashes))*bs <= len(tokens) {
			ev.TokenIDs = append([]uint32(nil), tokens[first*bs:(first+len(hashes))*bs]...)
		}
		e.events.evs = append(e.events.evs, ev)
	}
	e.kv.onRemove = func(hashes []uint64) {
		e.events.evs = append(e.events.evs, KVEvent{Type: "BlockRemoved", BlockHashes: append([]uint64(nil), hashes...)})
	}
}

// ClearCache drops every unreferenced cached block and publishes
// AllBlocksCleared (vLLM's reset_prefix_cache).
func (e *Engine) ClearCache() {
	on, onr := e.kv.onStore, e.kv.onRemove
	e.kv.onRemove = nil
	e.kv.clear()
	e.kv.onStore, e.kv.onRemove = on, onr
	if e.events != nil {
		e.events.evs = append(e.events.evs, KVEvent{Type: "AllBlocksCleared"})
		e.flushEvents(e.drv.now())
	}
}

func (e *Engine) flushEvents(now int64) {
	if e.events == nil || len(e.events.evs) == 0 {
		return
	}
	b := EventBatch{TS: float64(e.t(now).UnixNano()) / 1e9, Events: e.events.evs}
	e.events.evs = nil
	e.events.sink(e.Name, b)
}
