package sim

import (
	"context"
	"encoding/binary"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// KVEventsConfig enables vLLM KV events over ZMQ.
type KVEventsConfig struct {
	// Endpoint is the PUB endpoint, e.g. "tcp://*:5557" (vLLM's default) or
	// "tcp://127.0.0.1:0" (random port). Bound unless Dial is set.
	Endpoint string
	Dial     bool
	// ReplayEndpoint is the ROUTER replay endpoint (always bound); "" = off.
	ReplayEndpoint string
	// Topic defaults to "kv@<host:port>@<model>".
	Topic string
	// Buffer is how many batches the replay socket keeps (default 10000).
	Buffer int
	DPRank int
}

// KVPublisher publishes engine event batches as vLLM does: multipart
// [topic, seq (8-byte big-endian), msgpack EventBatch], the batch positional
// [ts, [events...], dp_rank], each event a positional array with its tag
// first:
//
//	["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size, lora_id|nil, "GPU", lora_name|nil]
//	["BlockRemoved", block_hashes, "GPU"]
//	["AllBlocksCleared"]
//
// The replay ROUTER answers a DEALER's ["", start_seq (8 bytes)] with
// [identity, "", seq, payload] for every buffered batch from start_seq, then
// [identity, "", seq=-1, ""] (empty payload: the end sentinel).
type KVPublisher struct {
	cfg    KVEventsConfig
	pub    zmq4.Socket
	router zmq4.Socket
	ch     chan []byte
	mu     sync.Mutex
	seq    uint64
	ring   []ringItem
	done   chan struct{}
	cancel context.CancelFunc
}

type ringItem struct {
	seq     uint64
	payload []byte
}

// NewKVPublisher opens the sockets.
func NewKVPublisher(ctx context.Context, cfg KVEventsConfig) (*KVPublisher, error) {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10000
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &KVPublisher{cfg: cfg, ch: make(chan []byte, 4096), done: make(chan struct{}), cancel: cancel}
	if cfg.Dial {
		p.pub = zmq4.NewPub(ctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true))
		if err := p.pub.Dial(cfg.Endpoint); err != nil {
			cancel()
			return nil, err
		}
	} else {
		p.pub = zmq4.NewPub(ctx)
		if err := p.pub.Listen(strings.Replace(cfg.Endpoint, "tcp://*:", "tcp://0.0.0.0:", 1)); err != nil {
			cancel()
			return nil, err
		}
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, zmq4.WithID(zmq4.SocketIdentity("sim-replay")))
		if err := p.router.Listen(strings.Replace(cfg.ReplayEndpoint, "tcp://*:", "tcp://0.0.0.0:", 1)); err != nil {
			p.pub.Close()
			cancel()
			return nil, err
		}
		go p.replay()
	}
	go p.run()
	return p, nil
}

// Addr is the bound PUB address (host:port), "" when dialling.
func (p *KVPublisher) Addr() string {
	if p.cfg.Dial || p.pub.Addr() == nil {
		return ""
	}
	return p.pub.Addr().String()
}

// ReplayAddr is the bound ROUTER address.
func (p *KVPublisher) ReplayAddr() string {
	if p.router == nil || p.router.Addr() == nil {
		return ""
	}
	return p.router.Addr().String()
}

// Topic is the publisher's topic.
func (p *KVPublisher) Topic() string { return p.cfg.Topic }

// EncodeEventBatch encodes a batch in vLLM's positional msgpack form.
func EncodeEventBatch(b EventBatch) ([]byte, error) {
	evs := make([]any, 0, len(b.Events))
	for _, e := range b.Events {
		switch e.Type {
		case "BlockStored":
			var parent any
			if e.ParentBlockHash != nil {
				parent = *e.ParentBlockHash
			}
			toks := e.TokenIDs
			if toks == nil {
				toks = []uint32{}
			}
			evs = append(evs, []any{"BlockStored", e.BlockHashes, parent, toks, e.BlockSize, nil, "GPU", nil})
		case "BlockRemoved":
			evs = append(evs, []any{"BlockRemoved", e.BlockHashes, "GPU"})
		default:
			evs = append(evs, []any{e.Type})
		}
	}
	return msgpack.Marshal([]any{b.TS, evs, b.DPRank})
}

// Sink is the KVEventSink to give an engine.
func (p *KVPublisher) Sink(_ string, b EventBatch) {
	b.DPRank = p.cfg.DPRank
	payload, err := EncodeEventBatch(b)
	if err != nil {
		return
	}
	select {
	case p.ch <- payload:
	default: // subscriber too slow: drop (the seq gap tells consumers)
		p.mu.Lock()
		p.seq++
		p.mu.Unlock()
	}
}

func (p *KVPublisher) run() {
	defer close(p.done)
	for payload := range p.ch {
		p.mu.Lock()
		seq := p.seq
		p.seq++
		p.ring = append(p.ring, ringItem{seq, payload})
		if len(p.ring) > p.cfg.Buffer {
			p.ring = p.ring[len(p.ring)-p.cfg.Buffer:]
		}
		p.mu.Unlock()
		var sb [8]byte
		binary.BigEndian.PutUint64(sb[:], seq)
		_ = p.pub.Send(zmq4.NewMsgFrom([]byte(p.cfg.Topic), sb[:], payload))
	}
}

func (p *KVPublisher) replay() {
	for {
		m, err := p.router.Recv()
		if err != nil {
			return
		}
		if len(m.Frames) < 2 {
			continue
		}
		id := m.Frames[0]
		last := m.Frames[len(m.Frames)-1]
		if len(last) != 8 {
			continue
		}
		start := binary.BigEndian.Uint64(last)
		p.mu.Lock()
		items := append([]ringItem(nil), p.ring...)
		p.mu.Unlock()
		for _, it := range items {
			if it.seq < start {
				continue
			}
			var sb [8]byte
			binary.BigEndian.PutUint64(sb[:], it.seq)
			if p.router.Send(zmq4.NewMsgFrom(id, nil, sb[:], it.payload)) != nil {
				break
			}
		}
		end := [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		_ = p.router.Send(zmq4.NewMsgFrom(id, nil, end[:], nil))
	}
}

// Close stops publishing.
func (p *KVPublisher) Close() {
	close(p.ch)
	<-p.done
	p.pub.Close()
	if p.router != nil {
		p.router.Close()
	}
	p.cancel()
}
