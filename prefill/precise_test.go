package prefill_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
	"github.com/vmihailenco/msgpack/v5"
)

// waitFor polls cond (bounded: 10 s) — used to wait for messages to cross
// real sockets, never to assert speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func posStored(hashes []any, parent any, toks []uint32) []any {
	return []any{"BlockStored", hashes, parent, toks, 16, nil, "GPU", nil}
}

func mapStored(hashes []any, parent any, toks []uint32) map[string]any {
	return map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": toks, "block_size": 16, "medium": "GPU"}
}

func posBatch(t *testing.T, evs ...any) []byte {
	b, err := msgpack.Marshal([]any{1.5, evs, nil})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mapBatch(t *testing.T, evs ...any) []byte {
	b, err := msgpack.Marshal(map[string]any{"ts": 1.5, "events": evs, "data_parallel_rank": 0})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type pubber struct {
	t   *testing.T
	pub zmq4.Socket
}

func (p pubber) send(seq uint64, payload []byte) {
	var sb [8]byte
	binary.BigEndian.PutUint64(sb[:], seq)
	if err := p.pub.Send(zmq4.NewMsgFrom([]byte("kv@e0@m"), sb[:], payload)); err != nil {
		p.t.Fatalf("publish: %v", err)
	}
}

func hash32(v uint64) []byte {
	b := make([]byte, 32)
	for i := range 24 {
		b[i] = 0xAB
	}
	binary.BigEndian.PutUint64(b[24:], v)
	return b
}

// keys returns our chained keys for toks from the base-model seed.
func keys(pp *prefill.PreciseProducer, toks []uint32) []uint64 {
	return prefill.ChainKeys(nil, pp.Seed(""), toks, 16, 0)
}

func TestPreciseKVEventsOverZMQ(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	eps := endpoints(2)
	eps[0] = profiles.NewEndpoint(0, "e0", "127.0.0.1:8000", map[string]string{prefill.KVEventsEndpointLabel: "tcp://" + pub.Addr().String()})
	s := sched(t, `plugins:
- type: precise-prefix-cache-producer
  name: kv
schedulingProfiles:
- name: p
  plugins: []
`, eps)
	pp := plugin[*prefill.PreciseProducer](t, s, "kv")
	pp.OnEndpointAdded(eps[0])
	p := pubber{t, pub}
	// Warm-up: a fresh SUB misses what is published before its
	// subscription arrives; publish empty batches until one lands.
	seq := uint64(100)
	waitFor(t, "subscription", func() bool {
		p.send(seq, posBatch(t))
		seq++
		_, ok := pp.SeqOf(eps[0])
		return ok
	})
	// Drain warm-ups in flight: wait until the last one is applied.
	waitFor(t, "warm-up drained", func() bool { s, _ := pp.SeqOf(eps[0]); return s == seq-1 })

	toks := ids(5, 64) // 4 blocks
	k := keys(pp, toks)
	big := uint64(1<<63 + 12345) // exceeds int64
	// 1. Positional, uint64 hashes, two blocks from the root.
	p.send(seq, posBatch(t, posStored([]any{big, uint64(2)}, nil, toks[:32])))
	seq++
	// 2. Map encoding, bytes hash, parent = engine hash 2.
	p.send(seq, mapBatch(t, mapStored([]any{hash32(3)}, uint64(2), toks[32:48])))
	seq++
	waitFor(t, "3 blocks", func() bool { return pp.Index().Len(0) == 3 })
	for i := range 3 {
		if !pp.Index().Has(0, k[i]) {
			t.Errorf("block %d not indexed under our key", i)
		}
	}
	req := request("m", toks)
	if err := pp.Produce(context.Background(), req, eps); err != nil {
		t.Fatal(err)
	}
	if mb, tb, mt := prefill.MatchOf(req, eps[0]); mb != 3 || tb != 4 || mt != 48 {
		t.Errorf("match e0 %d/%d (%d tokens), want 3/4 (48)", mb, tb, mt)
	}
	if mb, _, _ := prefill.MatchOf(req, eps[1]); mb != 0 {
		t.Errorf("e1 matched %d blocks, want 0", mb)
	}
	// 3. Removal by bytes hash (map form), child of block 2 by positional.
	p.send(seq, mapBatch(t, map[string]any{"type": "BlockRemoved", "block_hashes": []any{hash32(3)}, "medium": "GPU"}))
	seq++
	waitFor(t, "removal", func() bool { return pp.Index().Len(0) == 2 })
	if pp.Index().Has(0, k[2]) {
		t.Error("removed block still indexed")
	}
	// 4. Sequence gap with no replay endpoint: the endpoint's entries are
	// dropped, then the new message applies.
	seq += 3
	p.send(seq, posBatch(t, posStored([]any{uint64(77)}, nil, toks[:16])))
	waitFor(t, "gap handled", func() bool { s, _ := pp.SeqOf(eps[0]); return s == seq })
	if n := pp.Index().Len(0); n != 1 || !pp.Index().Has(0, k[0]) {
		t.Errorf("after gap: %d blocks (want only block 0)", n)
	}
	// 5. Restart: the sequence starts over; the old blocks must go.
	p.send(0, posBatch(t, posStored([]any{uint64(9)}, nil, ids(6, 16))))
	waitFor(t, "restart handled", func() bool { s, _ := pp.SeqOf(eps[0]); return s == 0 })
	if pp.Index().Has(0, k[0]) || pp.Index().Len(0) != 1 {
		t.Errorf("after restart: %d blocks, old block kept=%v", pp.Index().Len(0), pp.Index().Has(0, k[0]))
	}
	// 6. AllBlocksCleared.
	p.send(1, posBatch(t, []any{"AllBlocksCleared"}))
	waitFor(t, "cleared", func() bool { s, _ := pp.SeqOf(eps[0]); return s == 1 })
	if n := pp.Index().Len(0); n != 0 {
		t.Errorf("after AllBlocksCleared: %d blocks", n)
	}
	// Removing the endpoint forgets it.
	pp.OnEndpointRemoved(eps[0])
	if _, ok := pp.SeqOf(eps[0]); ok {
		t.Error("removed endpoint still tracked")
	}
}

// TestPreciseReplayOnGap runs a ROUTER replay endpoint holding the missed
// batch: the gap is closed by replay and nothing is dropped.
func TestPreciseReplayOnGap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	defer pub.Close()
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	router := zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("replay")))
	defer router.Close()
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	toks := ids(8, 48)
	missed := map[uint64][]byte{}
	go func() {
		for {
			m, err := router.Recv()
			if err != nil {
				return
			}
			start := binary.BigEndian.Uint64(m.Frames[len(m.Frames)-1])
			for s := start; ; s++ {
				pl, ok := missed[s]
				if !ok {
					break
				}
				var sb [8]byte
				binary.BigEndian.PutUint64(sb[:], s)
				_ = router.Send(zmq4.NewMsgFrom(m.Frames[0], nil, sb[:], pl))
			}
			_ = router.Send(zmq4.NewMsgFrom(m.Frames[0], nil, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, nil))
		}
	}()
	eps := []*profiles.Endpoint{profiles.NewEndpoint(0, "e0", "127.0.0.1:8000", map[string]string{
		prefill.KVEventsEndpointLabel: "tcp://" + pub.Addr().String(), prefill.KVReplayEndpointLabel: "tcp://" + router.Addr().String()})}
	s := sched(t, "plugins:\n- type: precise-prefix-cache-producer\n  name: kv\nschedulingProfiles:\n- name: p\n  plugins: []\n", eps)
	pp := plugin[*prefill.PreciseProducer](t, s, "kv")
	pp.OnEndpointAdded(eps[0])
	p := pubber{t, pub}
	seq := uint64(0)
	waitFor(t, "subscription", func() bool { p.send(seq, posBatch(t)); seq++; _, ok := pp.SeqOf(eps[0]); return ok })
	waitFor(t, "warm-up drained", func() bool { s, _ := pp.SeqOf(eps[0]); return s == seq-1 })
	p.send(seq, posBatch(t, posStored([]any{uint64(1)}, nil, toks[:16])))
	// seq+1 is "lost" on the live stream but kept by the replay buffer.
	missed[seq+1] = posBatch(t, posStored([]any{uint64(2)}, uint64(1), toks[16:32]))
	p.send(seq+2, posBatch(t, posStored([]any{uint64(3)}, uint64(2), toks[32:48])))
	waitFor(t, "replayed", func() bool { s, _ := pp.SeqOf(eps[0]); return s == seq+2 })
	if n := pp.Index().Len(0); n != 3 {
		t.Fatalf("after replay: %d blocks, want 3", n)
	}
	for i, k := range keys(pp, toks) {
		if !pp.Index().Has(0, k) {
			t.Errorf("block %d missing after replay", i)
		}
	}
}

func TestDecodeKVEventBatchErrors(t *testing.T) {
	for name, payload := range map[string][]byte{
		"not msgpack":  {0xc1},
		"scalar":       mustMsgpack(t, 3),
		"short":        mustMsgpack(t, []any{1.0}),
		"events type":  mustMsgpack(t, []any{1.0, "x", nil}),
		"bad hash":     mustMsgpack(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}, nil}),
		"bad token id": mustMsgpack(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 16}}, nil}),
		"tagless":      mustMsgpack(t, []any{1.0, []any{[]any{7}}, nil}),
	} {
		if _, err := prefill.DecodeKVEventBatch(payload); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	b, err := prefill.DecodeKVEventBatch(mustMsgpack(t, []any{1.0, []any{[]any{"SomethingNew", 1}, []any{"AllBlocksCleared"}}, 2}))
	if err != nil || len(b.Events) != 1 || b.Events[0].Type != "AllBlocksCleared" || b.DPRank == nil || *b.DPRank != 2 {
		t.Errorf("unknown events must be skipped: %+v, %v", b, err)
	}
}

func mustMsgpack(t *testing.T, v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var _ = fmt.Sprint
