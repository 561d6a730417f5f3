"""libzmq KV-event publisher for precise_py_test.go.

Binds a PUB socket on 127.0.0.1 (random port, printed first), publishes
empty warm-up batches until it reads "go" on stdin, then runs the scripted
steps: each step publishes vLLM-style multipart messages
[topic, seq (8-byte big-endian), msgpack EventBatch], prints "sent <n>" and
waits for "next" before the following step. Token ids come in argv[1] as
JSON.
"""
import json
import select
import struct
import sys
import time

import msgpack
import zmq

toks = json.loads(sys.argv[1])
ctx = zmq.Context()
pub = ctx.socket(zmq.PUB)
pub.setsockopt(zmq.LINGER, 2000)
port = pub.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)


def send(seq, batch):
    pub.send_multipart([b"kv@e0@m", struct.pack(">Q", seq), msgpack.packb(batch, use_bin_type=True)])


def wait(word):
    line = sys.stdin.readline().strip()
    if line != word:
        sys.exit("expected %r, got %r" % (word, line))


seq = 1000
deadline = time.time() + 20
while time.time() < deadline:
    send(seq, [time.time(), [], None])
    seq += 1
    r, _, _ = select.select([sys.stdin], [], [], 0.01)
    if r:
        break
wait("go")

big = (1 << 63) + 12345
h3 = b"\xab" * 24 + struct.pack(">Q", 3)
steps = [
    # positional (array_like) events, uint64 hash above int64
    [(seq, [1.0, [["BlockStored", [big, 2], None, toks[:32], 16, None, "GPU", None]], None]),
     # map encoding, bytes hash, parent = 2
     (seq + 1, {"ts": 2.0, "events": [{"type": "BlockStored", "block_hashes": [h3], "parent_block_hash": 2,
                                      "token_ids": toks[32:48], "block_size": 16, "lora_id": None, "medium": "GPU"}],
                "data_parallel_rank": 0})],
    # sequence gap (seq+2..seq+4 lost), no replay endpoint
    [(seq + 5, [3.0, [["BlockStored", [77], None, toks[:16], 16, None, "GPU", None]], None])],
    # engine restart: the sequence starts over
    [(0, [4.0, [["BlockStored", [9], None, [1] * 16, 16, None, "GPU", None]], None])],
]
for i, step in enumerate(steps):
    for s, b in step:
        send(s, b)
    print("sent", i, flush=True)
    wait("next")
pub.close()
ctx.term()
