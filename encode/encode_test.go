package encode_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/encode"
	"github.com/spillway-llm/spillway/profiles"
)

func encoders(n int) profiles.EndpointList {
	var eps profiles.EndpointList
	for i := range n {
		eps = append(eps, profiles.NewEndpoint(i, fmt.Sprintf("e%d", i), fmt.Sprintf("10.0.1.%d:8000", i+1), map[string]string{profiles.RoleLabel: "encode"}))
	}
	return eps
}

// A decode pod so that the disagg handler's destination exists.
func withDecode(eps profiles.EndpointList) profiles.EndpointList {
	return append(append(profiles.EndpointList{}, eps...), profiles.NewEndpoint(len(eps), "d0", "10.0.2.1:8000", map[string]string{profiles.RoleLabel: "decode"}))
}

const cfg = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: encode-filter
- type: encode-queue-scorer
- type: mm-embeddings-cache-producer
  parameters: {cacheSizeInMBPerServer: 20, embeddingBytesPerToken: 10240}
- type: mm-embeddings-cache-scorer
- type: disagg-profile-handler
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}]
- name: encode
  plugins: [{pluginRef: encode-filter}, {pluginRef: encode-queue-scorer, weight: 1}, {pluginRef: mm-embeddings-cache-scorer, weight: WEIGHT}]
`

func load(t *testing.T, eps profiles.EndpointList, cacheWeight string) (*profiles.Scheduler, *encode.QueueScorer, *encode.MMCacheProducer) {
	t.Helper()
	s, err := profiles.LoadConfigBytes("t.yaml", []byte(strings.Replace(cfg, "WEIGHT", cacheWeight, 1)), profiles.Options{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	q, _ := s.Plugin("encode-queue-scorer")
	p, _ := s.Plugin("mm-embeddings-cache-producer")
	return s, q.(*encode.QueueScorer), p.(*encode.MMCacheProducer)
}

func imgReq(t *testing.T, urls ...string) *profiles.Request {
	t.Helper()
	parts := []string{`{"type":"text","text":"look"}`}
	for _, u := range urls {
		parts = append(parts, `{"type":"image_url","image_url":{"url":"`+u+`"}}`)
	}
	r, err := profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{},
		[]byte(`{"model":"m","messages":[{"role":"user","content":[`+strings.Join(parts, ",")+`]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEncodeQueueDepthCountsInflightAndScrape(t *testing.T) {
	eps := encoders(3)
	s, q, _ := load(t, withDecode(eps), "0")
	eps[0].SetMetrics(&profiles.Metrics{WaitingQueue: 5})
	eps[1].SetMetrics(&profiles.Metrics{WaitingQueue: 0})
	eps[2].SetMetrics(&profiles.Metrics{WaitingQueue: 0})
	ctx := context.Background()
	r := imgReq(t, "http://i/1.png", "http://i/2.png")
	res, err := s.Schedule(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	encs := strings.Split(res.Headers[profiles.HeaderEncoderHostsPorts], ",")
	if len(encs) != 2 || encs[0] == encs[1] || encs[0] == eps[0].Address || encs[1] == eps[0].Address {
		t.Fatalf("encoders %v: want the two with empty queues, one image each", encs)
	}
	tr := s.Dispatch(r, res)
	if q.InFlight(eps[1]) != 1 || q.InFlight(eps[2]) != 1 || q.Depth(eps[0]) != 5 {
		t.Errorf("in flight %d %d, depth e0 %d", q.InFlight(eps[1]), q.InFlight(eps[2]), q.Depth(eps[0]))
	}
	// Scrape goes stale: only the picker's own bookings count.
	eps[0].SetMetrics(&profiles.Metrics{WaitingQueue: 5, Stale: true})
	if q.Depth(eps[0]) != 0 {
		t.Errorf("stale scrape counted: depth %d", q.Depth(eps[0]))
	}
	// Items are released when the prefill leg ends (encoders are done).
	tr.PrefillDone()
	if q.InFlight(eps[1])+q.InFlight(eps[2]) != 0 {
		t.Error("encoder bookings not released at PrefillDone")
	}
	tr.Finish(profiles.Usage{}) // no double release
	if q.InFlight(eps[1]) != 0 {
		t.Error("negative or double release")
	}
	// Failure path releases too.
	r2 := imgReq(t, "http://i/3.png")
	res2, _ := s.Schedule(ctx, r2)
	tr2 := s.Dispatch(r2, res2)
	tr2.Fail(context.Canceled)
	for _, e := range eps {
		if q.InFlight(e) != 0 {
			t.Errorf("%s leaked after Fail", e.Name)
		}
	}
}

func TestMMCacheAffinityFollowsEncoder(t *testing.T) {
	eps := encoders(4)
	s, _, prod := load(t, withDecode(eps), "2")
	ctx := context.Background()
	r := imgReq(t, "http://i/cat.png")
	res, err := s.Schedule(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	served := res.Headers[profiles.HeaderEncoderHostsPorts]
	s.Dispatch(r, res).Finish(profiles.Usage{})
	var servedEP *profiles.Endpoint
	for _, e := range eps {
		if e.Address == served {
			servedEP = e
		}
	}
	if !prod.Holds(servedEP, prod.ItemHash(r, 0)) {
		t.Fatal("item not recorded on the encoder that served it")
	}
	for _, e := range eps {
		if e != servedEP && prod.Holds(e, prod.ItemHash(r, 0)) {
			t.Errorf("item recorded on %s, which did not serve it", e.Name)
		}
	}
	for range 20 {
		again, _ := s.Schedule(ctx, imgReq(t, "http://i/cat.png", "http://i/dog.png"))
		got := strings.Split(again.Headers[profiles.HeaderEncoderHostsPorts], ",")
		if got[0] != served {
			t.Fatalf("cat went to %s, its embeddings are on %s", got[0], served)
		}
	}
}

func TestMMCacheBoundedMemory(t *testing.T) {
	eps := encoders(1)
	s, _, prod := load(t, withDecode(eps), "1")
	ctx := context.Background()
	// 20 MB budget, 1024 default tokens × 10240 B = 10 MiB per item: two fit.
	var reqs []*profiles.Request
	for i := range 5 {
		r := imgReq(t, fmt.Sprintf("http://i/%d.png", i))
		res, err := s.Schedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		s.Dispatch(r, res).Finish(profiles.Usage{})
		reqs = append(reqs, r)
		if prod.BytesHeld(eps[0]) > 20<<20 {
			t.Fatalf("holds %d bytes, budget 20 MiB", prod.BytesHeld(eps[0]))
		}
	}
	if prod.Holds(eps[0], prod.ItemHash(reqs[0], 0)) || !prod.Holds(eps[0], prod.ItemHash(reqs[4], 0)) || !prod.Holds(eps[0], prod.ItemHash(reqs[3], 0)) {
		t.Error("LRU kept the wrong items: want the two most recent")
	}
	s.OnEndpointRemoved(eps[0])
	if prod.BytesHeld(eps[0]) != 0 {
		t.Error("removed encoder's cache kept")
	}
}

func TestMMCacheParams(t *testing.T) {
	for _, p := range []string{`{cacheSizeInMBPerServer: 0}`, `{embeddingBytesPerToken: -1}`, `{encodeProfile: ""}`, `{x: 1}`} {
		c := strings.Replace(strings.Replace(cfg, "WEIGHT", "1", 1), "{cacheSizeInMBPerServer: 20, embeddingBytesPerToken: 10240}", p, 1)
		if _, err := profiles.LoadConfigBytes("t.yaml", []byte(c), profiles.Options{}); err == nil {
			t.Errorf("%s accepted", p)
		}
	}
	// The scorer needs a producer.
	c := strings.Replace(strings.Replace(cfg, "WEIGHT", "1", 1), "- type: mm-embeddings-cache-producer\n  parameters: {cacheSizeInMBPerServer: 20, embeddingBytesPerToken: 10240}\n", "", 1)
	if _, err := profiles.LoadConfigBytes("t.yaml", []byte(c), profiles.Options{}); err == nil || !strings.Contains(err.Error(), "mm-embeddings-cache-producer") {
		t.Errorf("scorer without producer: %v", err)
	}
}
