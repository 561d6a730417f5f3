package calibrate

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/test/sim"
)

// TestMeasureDecodeRecoversSimulatorStepConstants calibrates a real-HTTP
// simulated decode endpoint and expects the step-time formula of
// docs/sim.md back: a decode-only step of d sequences at context ctx costs
// StepBase + d × (DecodePerSeq + DecodePerCtxToken × ctx), so the fit's
// intercept is StepBase (12 ms) and its slope DecodePerSeq +
// DecodePerCtxToken × (prompt + mean generated tokens in the window)
// ≈ 200 µs + 40 ns × ~1.07k ≈ 243 µs.
//
// Tolerance: the simulator's step ends are exact in simulated time; only
// the wall-clock arrival of the two tokens bounding each stream's span
// carries jitter (goroutine scheduling on a loaded 2-core machine, ≈1 ms
// of wall time at time-scale 1, spread over ≥ 80 gaps
// per stream and averaged over the streams). That bounds the per-batch
// step error to a few percent; the slope, a difference over 31 sequences,
// and the intercept each stay within 15%.
func TestMeasureDecodeRecoversSimulatorStepConstants(t *testing.T) {
	retryWallClock(t, measureDecodeRecoversSimulatorStepConstants)
}

func measureDecodeRecoversSimulatorStepConstants(t tester) {
	prof := sim.MustProfile("qwen3-32b-h100")
	const scale = 1
	srv, err := sim.NewServer(sim.ServerConfig{Model: "qwen3", Profile: prof, TimeScale: scale})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var log bytes.Buffer
	const prompt, out = 1024, 96
	m, err := MeasureDecode(context.Background(), DecodeOptions{
		Options:      Options{Endpoint: srv.URL(), Model: "qwen3", Seed: 3, Log: &log, Timeout: 30 * time.Second, TimeScale: scale},
		BatchSizes:   []int{1, 4, 16, 32},
		PromptTokens: prompt, OutputTokens: out,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	t.Log("\n" + log.String())
	base := prof.StepBase.Seconds()
	// Mean context in the window: the prompt plus about half the output
	// (the window starts a few tokens in, once every stream decodes).
	ctx := float64(prompt) + float64(out)/2
	perSeq := prof.DecodePerSeq.Seconds() + prof.DecodePerCtxToken.Seconds()*ctx
	if math.Abs(m.Base-base)/base > 0.15 {
		t.Errorf("decode step base %.2f ms, want %.2f ms ±15%%", m.Base*1e3, base*1e3)
	}
	if math.Abs(m.PerSeq-perSeq)/perSeq > 0.15 {
		t.Errorf("decode step per sequence %.1f µs, want %.1f µs ±15%%", m.PerSeq*1e6, perSeq*1e6)
	}
	for _, s := range m.Steps {
		want := base + perSeq*float64(s.Batch)
		if math.Abs(s.Step.Seconds()-want)/want > 0.08 {
			t.Errorf("batch %d: step %v, want %.2f ms ±8%%", s.Batch, s.Step, want*1e3)
		}
	}
}

func TestMeasureDecodeErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := MeasureDecode(ctx, DecodeOptions{Options: Options{Endpoint: "http://127.0.0.1:1", Model: "m"}, BatchSizes: []int{4, 4}}); err == nil || !strings.Contains(err.Error(), "two distinct") {
		t.Errorf("one batch size accepted: %v", err)
	}
	if _, err := MeasureDecode(ctx, DecodeOptions{Options: Options{Endpoint: "http://127.0.0.1:1", Model: "m"}, BatchSizes: []int{0, 4}}); err == nil {
		t.Error("batch size 0 accepted")
	}
	if _, err := MeasureDecode(ctx, DecodeOptions{Options: Options{Model: "m"}}); err == nil {
		t.Error("missing endpoint accepted")
	}
	if _, err := MeasureDecode(ctx, DecodeOptions{Options: Options{Endpoint: "http://127.0.0.1:1", Model: "m", TimeScale: -1}}); err == nil {
		t.Error("negative time scale accepted")
	}
	// A server that streams a single token: no inter-token gaps to time.
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n"))
	}))
	defer ts.Close()
	_, err := MeasureDecode(ctx, DecodeOptions{Options: Options{Endpoint: ts.URL, Model: "m", Timeout: 5 * time.Second}, BatchSizes: []int{1, 2}, PromptTokens: 16, OutputTokens: 8})
	if err == nil || !strings.Contains(err.Error(), "produced 1 tokens") {
		t.Errorf("single-token stream (Fake server): %v", err)
	}
}

func TestFitLine(t *testing.T) {
	b, s := fitLine([]BatchStep{{Batch: 1, Step: 12 * time.Millisecond}, {Batch: 11, Step: 22 * time.Millisecond}, {Batch: 21, Step: 32 * time.Millisecond}})
	if math.Abs(b-0.011) > 1e-9 || math.Abs(s-0.001) > 1e-9 {
		t.Fatalf("fit base %g slope %g, want 0.011 and 0.001", b, s)
	}
}

// TestMeasureDecodeRejectsInconsistentStreamsFake: a fake server whose
// concurrent streams tick at different rates (which no batching engine
// does) is re-measured and then reported, not averaged into a fit.
func TestMeasureDecodeRejectsInconsistentStreamsFake(t *testing.T) {
	var n atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tokenize" {
			http.NotFound(w, r)
			return
		}
		gap := time.Millisecond
		if n.Add(1)%2 == 0 {
			gap = 4 * time.Millisecond
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 40 {
			w.Write([]byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\n"))
			w.(http.Flusher).Flush()
			time.Sleep(gap)
		}
		w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer ts.Close()
	var log bytes.Buffer
	_, err := MeasureDecode(context.Background(), DecodeOptions{Options: Options{Endpoint: ts.URL, Model: "m", Timeout: 10 * time.Second, Log: &log}, BatchSizes: []int{2, 4}, PromptTokens: 16, OutputTokens: 40})
	if err == nil || !strings.Contains(err.Error(), "inconsistent") {
		t.Fatalf("inconsistent streams accepted: %v\n%s", err, log.String())
	}
	if got := strings.Count(log.String(), "discarded"); got != maxBatchAttempts-1 {
		t.Fatalf("%d re-measurements logged, want %d:\n%s", got, maxBatchAttempts-1, log.String())
	}
}
