package prefill_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// python is Debian's interpreter: a pyenv python3 earlier on PATH would not
// have the python3-zmq / python3-msgpack packages.
const python = "/usr/bin/python3"

// TestPreciseKVEventsFromLibzmq has a libzmq (pyzmq) publisher send the
// engine's wire format to the pure-Go subscriber.
func TestPreciseKVEventsFromLibzmq(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import zmq, msgpack").CombinedOutput(); err != nil {
		t.Skipf("%s lacks zmq/msgpack (apt-get install python3-zmq python3-msgpack): %v %s", python, err, out)
	}
	toks := ids(5, 64)
	arg, _ := json.Marshal(toks)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "testdata/kvpub.py", string(arg))
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	out := bufio.NewScanner(stdoutPipe)
	line := func() string {
		if !out.Scan() {
			t.Fatalf("publisher exited: %s", stderr.String())
		}
		return out.Text()
	}
	port := line()
	eps := []*profiles.Endpoint{profiles.NewEndpoint(0, "e0", "127.0.0.1:8000", map[string]string{prefill.KVEventsEndpointLabel: "tcp://127.0.0.1:" + port})}
	s := sched(t, "plugins:\n- type: precise-prefix-cache-producer\n  name: kv\nschedulingProfiles:\n- name: p\n  plugins: []\n", eps)
	pp := plugin[*prefill.PreciseProducer](t, s, "kv")
	pp.OnEndpointAdded(eps[0])
	waitFor(t, "first warm-up batch", func() bool { _, ok := pp.SeqOf(eps[0]); return ok })
	fmt.Fprintln(stdin, "go")
	next := func(want string) {
		if got := line(); got != want {
			t.Fatalf("publisher said %q, want %q", got, want)
		}
	}
	k := keys(pp, toks)

	next("sent 0")
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
	if mb, _, mt := prefill.MatchOf(req, eps[0]); mb != 3 || mt != 48 {
		t.Errorf("match %d blocks (%d tokens), want 3 (48)", mb, mt)
	}
	last, _ := pp.SeqOf(eps[0])

	fmt.Fprintln(stdin, "next")
	next("sent 1")
	waitFor(t, "gap", func() bool { s, _ := pp.SeqOf(eps[0]); return s == last+4 })
	if pp.Index().Len(0) != 1 || !pp.Index().Has(0, k[0]) {
		t.Errorf("after gap: %d blocks, want only block 0", pp.Index().Len(0))
	}

	fmt.Fprintln(stdin, "next")
	next("sent 2")
	waitFor(t, "restart", func() bool { s, _ := pp.SeqOf(eps[0]); return s == 0 })
	if pp.Index().Has(0, k[0]) || pp.Index().Len(0) != 1 {
		t.Errorf("after restart: %d blocks, stale block kept=%v", pp.Index().Len(0), pp.Index().Has(0, k[0]))
	}
	fmt.Fprintln(stdin, "next")
	_, _ = io.Copy(io.Discard, stdoutPipe)
}
