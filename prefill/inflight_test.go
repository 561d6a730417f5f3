package prefill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// manualClock is a virtual clock the test advances.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *manualClock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

const inflightConfig = `plugins:
- type: approx-prefix-cache-producer
- type: inflight-load-producer
  name: load
  parameters: %s
- type: token-load-scorer
schedulingProfiles:
- name: p
  plugins: [{pluginRef: token-load-scorer}]
`

func schedClock(t *testing.T, params string, eps []*profiles.Endpoint, clk profiles.Clock) *profiles.Scheduler {
	t.Helper()
	s, err := profiles.LoadConfigBytes("test.yaml", []byte("apiVersion: llm-d.ai/v1alpha1\n"+fmt.Sprintf(inflightConfig, params)),
		profiles.Options{Endpoints: profiles.EndpointList(eps), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func assertZero(t *testing.T, eps []*profiles.Endpoint) {
	t.Helper()
	for _, e := range eps {
		if r, tok := prefill.LoadOf(e); r != 0 || tok != 0 {
			t.Errorf("%s: %d requests, %d tokens left in flight", e.Name, r, tok)
		}
	}
}

func TestInflightBookAndReleaseStages(t *testing.T) {
	eps := endpoints(2)
	s := schedClock(t, `{addEstimatedOutputTokens: true, outputRatio: 1.5, maxEstimatedOutputTokens: 1000}`, eps, nil)
	ctx := context.Background()
	// Warm e0 with the first 2048 tokens of the prompt.
	warm := request("m", ids(2, 2048))
	if _, err := s.Schedule(ctx, warm); err != nil {
		t.Fatal(err)
	}
	s.Dispatch(warm, result("p", eps[0])).Finish(profiles.Usage{})
	assertZero(t, eps)

	req := request("m", ids(2, 4096))
	req.MaxTokens = 500
	if _, err := s.Schedule(ctx, req); err != nil {
		t.Fatal(err)
	}
	tr := s.Dispatch(req, result("p", eps[0]))
	// Uncached 4096−2048, plus the output estimate min(4096×1.5, 500, 1000).
	if r, tok := prefill.LoadOf(eps[0]); r != 1 || tok != 2048+500 {
		t.Fatalf("booked %d requests, %d tokens; want 1, %d", r, tok, 2048+500)
	}
	tr.FirstChunk()
	if r, tok := prefill.LoadOf(eps[0]); r != 1 || tok != 500 {
		t.Fatalf("after first chunk %d requests, %d tokens; want 1, 500", r, tok)
	}
	tr.Finish(profiles.Usage{})
	assertZero(t, eps)
}

func TestInflightPrefillDecodeSplit(t *testing.T) {
	pre := profiles.NewEndpoint(0, "p0", "127.0.0.1:8100", map[string]string{profiles.RoleLabel: profiles.RolePrefill})
	dec := profiles.NewEndpoint(1, "d0", "127.0.0.1:8200", map[string]string{profiles.RoleLabel: profiles.RoleDecode})
	eps := []*profiles.Endpoint{pre, dec}
	for _, params := range []string{`{}`, `{prefillProfile: pf}`} {
		s := schedClock(t, params, eps, nil)
		req := request("m", ids(3, 1000))
		res := &profiles.Result{Primary: "dc", Profiles: map[string]*profiles.ProfileResult{
			"dc": {Profile: "dc", Targets: []*profiles.Endpoint{dec}}, "pf": {Profile: "pf", Targets: []*profiles.Endpoint{pre}}}}
		tr := s.Dispatch(req, res)
		if r, tok := prefill.LoadOf(pre); r != 1 || tok != 1000 {
			t.Fatalf("%s: prefill endpoint %d requests, %d tokens; want 1, 1000", params, r, tok)
		}
		if r, tok := prefill.LoadOf(dec); r != 1 || tok != 0 {
			t.Fatalf("%s: decode endpoint %d requests, %d tokens; want 1, 0", params, r, tok)
		}
		tr.PrefillDone()
		if r, tok := prefill.LoadOf(pre); r != 0 || tok != 0 {
			t.Fatalf("%s: prefill endpoint keeps %d, %d after its leg", params, r, tok)
		}
		tr.Finish(profiles.Usage{})
		assertZero(t, eps)
	}
}

// TestInflightZeroAfterEverything runs many concurrent requests through
// every ending: finished (streamed and not), failed before and after the
// first chunk, cancelled, and never answered (released by the janitor's
// sweep after the TTL). Every counter must come back to exactly zero.
func TestInflightZeroAfterEverything(t *testing.T) {
	eps := endpoints(4)
	clk := &manualClock{t: time.Unix(1_700_000_000, 0)}
	s := schedClock(t, `{addEstimatedOutputTokens: true, ttl: 10m}`, eps, clk)
	ip := plugin[*prefill.InflightProducer](t, s, "load")
	ctx := context.Background()
	const n = 400
	var wg sync.WaitGroup
	var mu sync.Mutex
	var abandoned int
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := request("m", ids(uint32(i%17), 300+i))
			res, err := s.Schedule(ctx, req)
			if err != nil {
				t.Error(err)
				return
			}
			tr := s.Dispatch(req, res)
			switch i % 6 {
			case 0: // streamed
				tr.FirstChunk()
				tr.Finish(profiles.Usage{Reported: true})
			case 1: // non-streamed: Finish fires the earlier hooks
				tr.Finish(profiles.Usage{})
			case 2: // upstream error before any chunk
				tr.Fail(errors.New("503 from engine"))
			case 3: // client went away mid-stream
				tr.FirstChunk()
				tr.Fail(context.Canceled)
			case 4: // hooks delivered twice must not release twice
				tr.FirstChunk()
				tr.FirstChunk()
				tr.Finish(profiles.Usage{})
				tr.Fail(errors.New("late"))
			case 5: // never answered: nothing ends it
				mu.Lock()
				abandoned++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got := ip.Outstanding(); got != abandoned {
		t.Fatalf("%d bookings outstanding, want the %d abandoned", got, abandoned)
	}
	var booked int64
	for _, e := range eps {
		r, _ := prefill.LoadOf(e)
		booked += r
	}
	if booked != int64(abandoned) {
		t.Fatalf("%d requests in flight, want %d", booked, abandoned)
	}
	if swept := ip.Sweep(); swept != 0 {
		t.Fatalf("sweep before the TTL released %d", swept)
	}
	clk.Add(11 * time.Minute)
	if swept := ip.Sweep(); swept != abandoned {
		t.Fatalf("sweep released %d, want %d", swept, abandoned)
	}
	assertZero(t, eps)
	if ip.Outstanding() != 0 {
		t.Errorf("%d bookings left", ip.Outstanding())
	}
}

func TestInflightConfigErrors(t *testing.T) {
	base := "plugins:\n- type: inflight-load-producer\n  parameters: %s\nschedulingProfiles:\n- name: p\n  plugins: []\n"
	for params, want := range map[string]string{
		`{outputRatio: -1}`:               "outputRatio",
		`{maxEstimatedOutputTokens: -5}`:  "maxEstimatedOutputTokens",
		`{ttl: 0s}`:                       "ttl",
		`{addEstimatedOutputToken: true}`: "unknown parameter",
	} {
		loadErr(t, fmt.Sprintf(base, params), want)
	}
}

// TestLoadOfEndpointsSharingAnIndex: two pools' endpoints with the same
// Index keep separate counters.
func TestLoadOfEndpointsSharingAnIndex(t *testing.T) {
	a, b := endpoints(1), endpoints(1)
	sa := schedClock(t, `{}`, a, nil)
	sb := schedClock(t, `{}`, b, nil)
	ta := sa.Dispatch(tokensOnly(100), result("p", a[0]))
	tb := sb.Dispatch(tokensOnly(7), result("p", b[0]))
	if _, tok := prefill.LoadOf(a[0]); tok != 100 {
		t.Errorf("a: %d tokens, want 100", tok)
	}
	if _, tok := prefill.LoadOf(b[0]); tok != 7 {
		t.Errorf("b: %d tokens, want 7", tok)
	}
	ta.Finish(profiles.Usage{})
	tb.Finish(profiles.Usage{})
	assertZero(t, append(a, b...))
}
