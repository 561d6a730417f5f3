package calibrate

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/test/sim"
)

// TestMeasureAgainstSimulator calibrates a real-HTTP simulated endpoint and
// expects its profile's configured chunk throughput, B / T(B).
func TestMeasureAgainstSimulator(t *testing.T) { retryWallClock(t, measureAgainstSimulator) }

func measureAgainstSimulator(t tester) {
	// A slow chunk (2 s) keeps the HTTP and scheduling overhead of a busy
	// test machine (tens of ms) well inside the 5% tolerance.
	prof := sim.MustProfile("qwen3-32b-h100")
	prof.ChunkTime = 2 * time.Second
	srv, err := sim.NewServer(sim.ServerConfig{Model: "qwen3", Profile: prof})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var log bytes.Buffer
	m, err := Measure(context.Background(), Options{Endpoint: srv.URL(), Model: "qwen3", ChunkSize: prof.MaxNumBatchedTokens, Warmups: 1, Samples: 3, Seed: 7, Log: &log})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	want := float64(prof.MaxNumBatchedTokens) / prof.ChunkTime.Seconds() // 4096
	if m.LengthSource != "tokenize" || m.PromptTokens != prof.MaxNumBatchedTokens {
		t.Fatalf("prompt %d tokens via %s, want exactly %d via /tokenize", m.PromptTokens, m.LengthSource, prof.MaxNumBatchedTokens)
	}
	if math.Abs(m.PeakPrefillThroughput-want)/want > 0.05 {
		t.Fatalf("peakPrefillThroughput %.0f, want %.0f ±5%%\n%s", m.PeakPrefillThroughput, want, log.String())
	}
	if len(m.TTFTs) != 3 || !strings.Contains(log.String(), "warm-up") {
		t.Fatalf("samples %d; log:\n%s", len(m.TTFTs), log.String())
	}
	tab := m.TauTable([]time.Duration{14 * time.Second})
	if !strings.Contains(tab, "14s") {
		t.Fatalf("tau table: %s", tab)
	}
	if tau := m.Tau(14 * time.Second); math.Abs(tau-want*14)/(want*14) > 0.05 {
		t.Fatalf("τ(14 s) = %.0f, want ≈ %.0f", tau, want*14)
	}
}

// TestMeasureWithoutTokenizeFake uses a fake OpenAI server without
// /tokenize: the length is checked from the reported usage.
func TestMeasureWithoutTokenizeFake(t *testing.T) {
	var promptWords int
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		var b struct{ Prompt string }
		decode(r, &b)
		promptWords = len(strings.Fields(b.Prompt))
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte(`data: {"choices":[{"text":"x"}]}` + "\n\n"))
		w.Write([]byte(`data: {"choices":[],"usage":{"prompt_tokens":` + itoa(promptWords) + `}}` + "\n\ndata: [DONE]\n\n"))
	}))
	defer ts.Close()
	m, err := Measure(context.Background(), Options{Endpoint: ts.URL, Model: "m", ChunkSize: 64, Warmups: 1, Samples: 3})
	if err != nil {
		t.Fatal(err)
	}
	if m.LengthSource != "usage" || m.PromptTokens != 64 || m.PeakPrefillThroughput <= 0 {
		t.Fatalf("%+v", m)
	}
}

func TestMeasureErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Measure(ctx, Options{Model: "m", ChunkSize: 8192}); err == nil {
		t.Error("missing endpoint accepted")
	}
	if _, err := Measure(ctx, Options{Endpoint: "http://127.0.0.1:1", Model: "m", ChunkSize: 4}); err == nil {
		t.Error("tiny chunk accepted")
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "model not found", http.StatusBadRequest)
	}))
	defer ts.Close()
	_, err := Measure(ctx, Options{Endpoint: ts.URL, Model: "m", ChunkSize: 64, Warmups: 0, Samples: 1, Timeout: 5 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("server error not reported: %v", err)
	}
}

func TestMatrixMergeAndShippedFile(t *testing.T) {
	shipped, err := ReadMatrix(filepath.Join("..", "deploy", "calibration", "matrix.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := shipped.Lookup("qwen3-32b", "h100", "vllm", 2, 8192); !ok || e.PeakPrefillThroughput != 15928 {
		t.Fatalf("shipped Qwen3-32B/H100 row: %+v %v", e, ok)
	}
	if e, ok := shipped.Lookup("GLM-5.2-NVFP4", "B200", "SGLang", 8, 32768); !ok || e.PeakPrefillThroughput != 24027 {
		t.Fatalf("shipped GLM row: %+v %v", e, ok)
	}
	// the filter's own loader must accept the shipped file too
	b, _ := os.ReadFile(filepath.Join("..", "deploy", "calibration", "matrix.yaml"))
	pm, err := prefill.ParseMatrix("matrix.yaml", b)
	if err != nil {
		t.Fatalf("prefill.ParseMatrix: %v", err)
	}
	if e, err := pm.Lookup(prefill.Fingerprint{Model: "Qwen3-VL-32B", Accelerator: "H200", Engine: "vLLM", TP: 2, ChunkSize: 8192}); err != nil || e.PeakPrefillThroughput != 15751 {
		t.Fatalf("prefill lookup: %+v %v", e, err)
	}
	if len(shipped.Entries) != 11 {
		t.Fatalf("%d shipped rows, want 11", len(shipped.Entries))
	}
	p := filepath.Join(t.TempDir(), "sub", "matrix.yaml")
	m, _ := ReadMatrix(p)
	row := Entry{Model: "sim", Accelerator: "cpu", Engine: "spillway-sim", TP: 1, ChunkSize: 8192, PeakPrefillThroughput: 20480}
	if replaced, err := m.Merge(row); err != nil || replaced {
		t.Fatal(err, replaced)
	}
	if err := WriteMatrix(p, m); err != nil {
		t.Fatal(err)
	}
	m2, err := ReadMatrix(p)
	if err != nil {
		t.Fatal(err)
	}
	cost := 1e-5
	m2.Entries[0].DecodeCost = &cost
	row.PeakPrefillThroughput = 20000
	if replaced, _ := m2.Merge(row); !replaced || len(m2.Entries) != 1 {
		t.Fatal("merge did not replace the row")
	}
	if m2.Entries[0].PeakPrefillThroughput != 20000 || m2.Entries[0].DecodeCost == nil {
		t.Fatalf("merged row %+v: want the new throughput and the kept decodeCost", m2.Entries[0])
	}
	if _, err := m2.Merge(Entry{Model: "x"}); err == nil {
		t.Fatal("invalid row accepted")
	}
	if _, err := ParseMatrix("dup", []byte("entries:\n- {model: a, accelerator: b, engine: c, tp: 1, chunkSize: 1, peakPrefillThroughput: 1}\n- {model: A, accelerator: b, engine: c, tp: 1, chunkSize: 1, peakPrefillThroughput: 2}\n")); err == nil {
		t.Fatal("duplicate rows accepted")
	}
	if _, err := ParseMatrix("bad", []byte("entries: [{model: a, bogus: 1}]")); err == nil {
		t.Fatal("unknown field accepted")
	}
	if b, _ := os.ReadFile(p); !bytes.HasPrefix(b, []byte("# peakPrefillThroughput")) {
		t.Fatal("written matrix lacks its header")
	}
}
