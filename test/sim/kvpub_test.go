package sim

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// A test subscriber asserting vLLM's KV-event wire format.
func TestKVEventsOverZMQ(t *testing.T) {
	s, err := NewServer(ServerConfig{Model: "m", TimeScale: 50,
		KVEvents: &KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial("tcp://" + s.KVEventsAddr()); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // warm-up: the subscription must reach the PUB
	prompt := words(42, 40)            // 40 tokens: 2 full blocks
	if code, m := post(t, s.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 1}); code != 200 {
		t.Fatal(code, m)
	}
	msg, err := sub.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Frames) != 3 {
		t.Fatalf("%d frames", len(msg.Frames))
	}
	if topic := string(msg.Frames[0]); topic != "kv@"+s.Addr()+"@m" {
		t.Fatalf("topic %q", topic)
	}
	if len(msg.Frames[1]) != 8 || binary.BigEndian.Uint64(msg.Frames[1]) != 0 {
		t.Fatalf("seq %x", msg.Frames[1])
	}
	var batch []any
	if err := msgpack.Unmarshal(msg.Frames[2], &batch); err != nil {
		t.Fatal(err)
	}
	if len(batch) != 3 {
		t.Fatalf("batch %v", batch)
	}
	if _, ok := batch[0].(float64); !ok {
		t.Fatalf("ts %T", batch[0])
	}
	evs := batch[1].([]any)
	ev := evs[0].([]any)
	if len(ev) != 8 || ev[0] != "BlockStored" || ev[2] != nil || ev[6] != "GPU" || ev[5] != nil || ev[7] != nil {
		t.Fatalf("event %v", ev)
	}
	toks := TokenizeText(prompt)
	want := BlockHashes(toks, 16)
	hs := ev[1].([]any)
	if len(hs) != 2 || toU64(hs[0]) != want[0] || toU64(hs[1]) != want[1] {
		t.Fatalf("hashes %v want %v", hs, want)
	}
	ti := ev[3].([]any)
	if len(ti) != 32 || toU64(ti[0]) != uint64(toks[0]) || toU64(ev[4]) != 16 {
		t.Fatalf("tokens %d block size %v", len(ti), ev[4])
	}
	// reset_prefix_cache publishes AllBlocksCleared
	s.Engine.Do(func(e *Engine) { e.ClearCache() })
	msg, err = sub.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if binary.BigEndian.Uint64(msg.Frames[1]) != 1 {
		t.Fatal("seq should be 1")
	}
	var batch2 []any
	if err := msgpack.Unmarshal(msg.Frames[2], &batch2); err != nil {
		t.Fatal(err)
	}
	evs = batch2[1].([]any)
	if evs[0].([]any)[0] != "AllBlocksCleared" {
		t.Fatalf("%v", evs)
	}
	// replay from seq 0: two batches then the sentinel with an empty payload
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial("tcp://" + s.KVReplayAddr()); err != nil {
		t.Fatal(err)
	}
	var start [8]byte
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		m, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		f := m.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:]
		}
		if len(f) != 2 {
			t.Fatalf("replay frames %d", len(f))
		}
		if len(f[1]) == 0 {
			break
		}
		seqs = append(seqs, binary.BigEndian.Uint64(f[0]))
	}
	if len(seqs) != 2 || seqs[0] != 0 || seqs[1] != 1 {
		t.Fatalf("replayed %v", seqs)
	}
}

func toU64(v any) uint64 {
	switch x := v.(type) {
	case uint64:
		return x
	case int64:
		return uint64(x)
	case uint32:
		return uint64(x)
	case int8:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int:
		return uint64(x)
	}
	return 0
}

// The simulator can dial a consumer's bound SUB (llm-d's precise-prefix
// setups bind on the router side).
func TestKVEventsDial(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	sub.SetOption(zmq4.OptionSubscribe, "")
	s, err := NewServer(ServerConfig{Model: "m", TimeScale: 50, KVEvents: &KVEventsConfig{Endpoint: "tcp://" + sub.Addr().String(), Dial: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	time.Sleep(300 * time.Millisecond) // warm-up
	post(t, s.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": words(77, 20), "max_tokens": 1})
	m, err := sub.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frames) != 3 || !bytesHasPrefix(m.Frames[0], "kv@") {
		t.Fatalf("%v", m.Frames)
	}
}

func bytesHasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }
