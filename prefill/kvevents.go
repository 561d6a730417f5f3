package prefill

import (
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// KVEvent is one decoded vLLM KV-cache event (protocols.md §5).
type KVEvent struct {
	Type            string // BlockStored, BlockRemoved, AllBlocksCleared
	BlockHashes     []uint64
	ParentBlockHash *uint64
	TokenIDs        []uint32
	BlockSize       int
	LoRAName        string
	Medium          string
}

// KVEventBatch is one decoded EventBatch.
type KVEventBatch struct {
	TS     float64
	Events []KVEvent
	DPRank *int
}

// DecodeKVEventBatch decodes a msgpack EventBatch in either encoding: the
// positional [ts, events, dp_rank] with tagged positional events, or a map
// with keys ts/events/data_parallel_rank and events as maps with "type".
// Unknown event types are skipped (newer engines may add some).
func DecodeKVEventBatch(payload []byte) (KVEventBatch, error) {
	var raw any
	if err := msgpack.Unmarshal(payload, &raw); err != nil {
		return KVEventBatch{}, fmt.Errorf("event batch: %w", err)
	}
	var b KVEventBatch
	var evs any
	switch v := raw.(type) {
	case []any:
		if len(v) < 2 {
			return b, fmt.Errorf("event batch: positional form needs [ts, events, ...], got %d fields", len(v))
		}
		b.TS, _ = toFloat(v[0])
		evs = v[1]
		if len(v) > 2 {
			if r, ok := toInt(v[2]); ok {
				b.DPRank = &r
			}
		}
	case map[string]any:
		b.TS, _ = toFloat(v["ts"])
		evs = v["events"]
		if r, ok := toInt(v["data_parallel_rank"]); ok {
			b.DPRank = &r
		}
	default:
		return b, fmt.Errorf("event batch: want an array or a map, got %T", raw)
	}
	list, ok := evs.([]any)
	if !ok && evs != nil {
		return b, fmt.Errorf("event batch: events must be a list, got %T", evs)
	}
	for i, e := range list {
		ev, ok, err := decodeEvent(e)
		if err != nil {
			return b, fmt.Errorf("event %d: %w", i, err)
		}
		if ok {
			b.Events = append(b.Events, ev)
		}
	}
	return b, nil
}

// Positional field order after the tag.
var positional = map[string][]string{
	"BlockStored":      {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"},
	"BlockRemoved":     {"block_hashes", "medium"},
	"AllBlocksCleared": {},
}

func decodeEvent(e any) (KVEvent, bool, error) {
	var typ string
	fields := map[string]any{}
	switch v := e.(type) {
	case []any:
		if len(v) == 0 {
			return KVEvent{}, false, fmt.Errorf("empty event")
		}
		t, ok := v[0].(string)
		if !ok {
			return KVEvent{}, false, fmt.Errorf("event tag must be a string, got %T", v[0])
		}
		typ = t
		names, known := positional[typ]
		if !known {
			return KVEvent{}, false, nil
		}
		for i, name := range names {
			if i+1 < len(v) {
				fields[name] = v[i+1]
			}
		}
	case map[string]any:
		t, ok := v["type"].(string)
		if !ok {
			return KVEvent{}, false, fmt.Errorf("event map needs a string \"type\"")
		}
		typ, fields = t, v
		if _, known := positional[typ]; !known {
			return KVEvent{}, false, nil
		}
	default:
		return KVEvent{}, false, fmt.Errorf("event must be an array or a map, got %T", e)
	}
	ev := KVEvent{Type: typ}
	if typ == "AllBlocksCleared" {
		return ev, true, nil
	}
	hs, ok := fields["block_hashes"].([]any)
	if !ok {
		return ev, false, fmt.Errorf("%s: block_hashes must be a list, got %T", typ, fields["block_hashes"])
	}
	for _, h := range hs {
		v, err := blockHash(h)
		if err != nil {
			return ev, false, fmt.Errorf("%s: %w", typ, err)
		}
		ev.BlockHashes = append(ev.BlockHashes, v)
	}
	ev.Medium, _ = fields["medium"].(string)
	if typ == "BlockRemoved" {
		return ev, true, nil
	}
	if p := fields["parent_block_hash"]; p != nil {
		v, err := blockHash(p)
		if err != nil {
			return ev, false, fmt.Errorf("parent_block_hash: %w", err)
		}
		ev.ParentBlockHash = &v
	}
	if toks, ok := fields["token_ids"].([]any); ok {
		ev.TokenIDs = make([]uint32, len(toks))
		for i, t := range toks {
			n, ok := toInt(t)
			if !ok || n < 0 || n > 1<<32-1 {
				return ev, false, fmt.Errorf("token_ids[%d]: not a token id: %v", i, t)
			}
			ev.TokenIDs[i] = uint32(n)
		}
	} else if fields["token_ids"] != nil {
		return ev, false, fmt.Errorf("token_ids must be a list, got %T", fields["token_ids"])
	}
	if bs, ok := toInt(fields["block_size"]); ok {
		ev.BlockSize = bs
	}
	ev.LoRAName, _ = fields["lora_name"].(string)
	return ev, true, nil
}

// blockHash accepts uint64 (which may exceed int64), negative int64 (two's
// complement of the same bits) or bytes (last 8 bytes, big-endian).
func blockHash(v any) (uint64, error) {
	switch h := v.(type) {
	case uint64:
		return h, nil
	case int64:
		return uint64(h), nil
	case uint8, uint16, uint32, int8, int16, int32, int:
		n, _ := toInt(h)
		return uint64(n), nil
	case []byte:
		return bytesHash(h)
	case string:
		return bytesHash([]byte(h))
	}
	return 0, fmt.Errorf("block hash must be an integer or bytes, got %T", v)
}

func bytesHash(b []byte) (uint64, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("empty block hash")
	}
	var buf [8]byte
	if len(b) >= 8 {
		copy(buf[:], b[len(b)-8:])
	} else {
		copy(buf[8-len(b):], b)
	}
	return binary.BigEndian.Uint64(buf[:]), nil
}

func toInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int8:
		return int(n), true
	case int16:
		return int(n), true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case uint8:
		return int(n), true
	case uint16:
		return int(n), true
	case uint32:
		return int(n), true
	case uint64:
		if n > 1<<62 {
			return 0, false
		}
		return int(n), true
	}
	return 0, false
}

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	}
	if i, ok := toInt(v); ok {
		return float64(i), true
	}
	return 0, false
}
