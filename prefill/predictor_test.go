package prefill_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// fakeTTFTPredictor stands in for costmodel's latency-predictor: fixed TTFT
// per endpoint name.
type fakeTTFTPredictor struct {
	profiles.Named
	ms map[string]float64
}

func (f *fakeTTFTPredictor) PredictTTFT(_ *profiles.Request, ep *profiles.Endpoint) (time.Duration, bool) {
	v, ok := f.ms[ep.Name]
	return time.Duration(v * float64(time.Millisecond)), ok
}

func init() {
	profiles.Register("fake-ttft-predictor", func(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
		p := map[string]float64{}
		if err := profiles.DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		return &fakeTTFTPredictor{Named: profiles.NewNamed("fake-ttft-predictor", name), ms: p}, nil
	})
}

func TestAffinityLatencyPredictorSourceFake(t *testing.T) {
	for _, c := range []struct {
		e0, e1  float64
		outcome string
	}{{20000, 1000, "released"}, {5999, 1000, "sticky"}, {6001, 1000, "released"}} {
		eps := endpoints(2)
		s := sched(t, fmt.Sprintf(`plugins:
- type: approx-prefix-cache-producer
- type: fake-ttft-predictor
  name: pred
  parameters: {e0: %g, e1: %g}
- type: prefix-cache-affinity-filter
  name: affinity
  parameters: {ttftSource: latencyPredictor, predictorRef: pred, maxTTFTPenaltyMs: 5000}
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: affinity}]
`, c.e0, c.e1), eps)
		warm := request("m", ids(1, 512))
		if _, err := s.Schedule(context.Background(), warm); err != nil {
			t.Fatal(err)
		}
		s.Dispatch(warm, result("prefill", eps[0])).Finish(profiles.Usage{})
		req := request("m", ids(1, 512))
		if _, err := s.Schedule(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		_, d := decide(t, s, req, eps)
		if d.Outcome != c.outcome || d.GapMs != c.e0-c.e1 {
			t.Errorf("TTFT %g vs %g ms: %+v, want %s with gap %g", c.e0, c.e1, d, c.outcome, c.e0-c.e1)
		}
	}
	// Without predictorRef the config's only predictor is used.
	eps := endpoints(2)
	s := sched(t, `plugins:
- type: fake-ttft-predictor
  name: pred
  parameters: {e0: 1}
- type: prefix-cache-affinity-filter
  name: affinity
  parameters: {ttftSource: latencyPredictor, maxTTFTPenaltyMs: 5000}
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: affinity}]
`, eps)
	if p := plugin[*prefill.AffinityFilter](t, s, "affinity").Params().(prefill.AffinityParams); p.PredictorRef != "pred" {
		t.Errorf("predictorRef resolved to %q, want pred", p.PredictorRef)
	}
	loadErr(t, `plugins:
- type: fake-ttft-predictor
  name: a
- type: fake-ttft-predictor
  name: b
- type: prefix-cache-affinity-filter
  parameters: {ttftSource: latencyPredictor}
schedulingProfiles:
- name: p
  plugins: [{pluginRef: prefix-cache-affinity-filter}]
`, "several predictors")
	loadErr(t, `plugins:
- type: token-load-scorer
- type: prefix-cache-affinity-filter
  parameters: {ttftSource: latencyPredictor, predictorRef: token-load-scorer}
schedulingProfiles:
- name: p
  plugins: [{pluginRef: prefix-cache-affinity-filter}]
`, "does not predict TTFT")
}

// TestPreciseBindModeEnginesDialIn: the producer binds and the engine's PUB
// dials it; the topic names the endpoint.
func TestPreciseBindModeEnginesDialIn(t *testing.T) {
	eps := endpoints(2)
	s := sched(t, "plugins:\n- type: precise-prefix-cache-producer\n  name: kv\n  parameters: {bind: \"tcp://127.0.0.1:0\"}\nschedulingProfiles:\n- name: p\n  plugins: []\n", eps)
	pp := plugin[*prefill.PreciseProducer](t, s, "kv")
	pp.OnEndpointAdded(eps[0])
	pp.OnEndpointAdded(eps[1])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx, zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true))
	defer pub.Close()
	if err := pub.Dial(pp.BindAddr()); err != nil {
		t.Fatal(err)
	}
	toks := ids(4, 32)
	topic := "kv@" + eps[1].Address + "@m"
	seq := uint64(0)
	send := func(payload []byte) {
		var sb [8]byte
		sb[7] = byte(seq)
		seq++
		if err := pub.Send(zmq4.NewMsgFrom([]byte(topic), sb[:], payload)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "subscription", func() bool { send(posBatch(t)); _, ok := pp.SeqOf(eps[1]); return ok })
	send(posBatch(t, posStored([]any{uint64(1), uint64(2)}, nil, toks)))
	waitFor(t, "blocks on e1", func() bool { return pp.Index().Len(1) == 2 })
	if pp.Index().Len(0) != 0 {
		t.Error("blocks attributed to the wrong endpoint")
	}
	req := request("m", toks)
	if err := pp.Produce(context.Background(), req, eps); err != nil {
		t.Fatal(err)
	}
	if mb, _, mt := pp.MatchOf(req, eps[1]); mb != 2 || mt != 32 {
		t.Errorf("match %d blocks, %d tokens; want 2, 32", mb, mt)
	}
}
