package tokenproducer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

// fakeEngine is a real HTTP chat-completions server (Fake: it generates
// nothing) whose usage.prompt_tokens is textRatio × the estimate of the
// text plus imageRatio × the formula's image tokens — a model whose
// tokenizer is denser than 4 bytes per token.
func fakeEngine(t *testing.T, textRatio, imageRatio float64) *httptest.Server {
	est := newCounter(t, "", nil) // the uncalibrated estimate, as the engine's "truth" basis
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r.Body)
		req, err := profiles.ParseRequest(r.URL.Path, map[string]string{}, buf.Bytes())
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		_, raw, err := est.Count(r.Context(), req, nil)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		prompt := int(math.Round(float64(raw.Text)*textRatio + float64(raw.Image)*imageRatio))
		_ = json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": "ok"}}},
			"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": 1, "total_tokens": prompt + 1},
		})
	}))
	t.Cleanup(ts.Close)
	return ts
}

func engineUsage(t *testing.T, url string, body []byte) int {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("engine: %s %v", resp.Status, err)
	}
	return out.Usage.PromptTokens
}

const calibConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
    calibrateFromUsage: %v
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
`

// TestCalibrationFakeEngine runs requests through the real scheduler and a
// real HTTP engine whose usage is 1.3× the estimate; the lifecycle's Finish
// feeds usage.prompt_tokens back. After a few responses the estimate of a
// new request is within 2% of what the engine reports.
func TestCalibrationFakeEngine(t *testing.T) {
	for _, apply := range []bool{true, false} {
		t.Run(fmt.Sprintf("calibrateFromUsage=%v", apply), func(t *testing.T) {
			eng := fakeEngine(t, 1.3, 1.1)
			ep := profiles.NewEndpoint(0, "engine", strings.TrimPrefix(eng.URL, "http://"), nil)
			reg := prometheus.NewRegistry()
			s, err := profiles.LoadConfigBytes("calib.yaml", []byte(fmt.Sprintf(calibConfig, apply)), profiles.Options{Endpoints: profiles.EndpointList{ep}, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			send := func(body []byte) (estimate, actual int) {
				req := parse(t, body)
				res, err := s.Schedule(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				tr := s.Dispatch(req, res)
				actual = engineUsage(t, "http://"+res.Destination()[0].Address, body)
				tr.Finish(profiles.Usage{PromptTokens: actual, Reported: true})
				return req.Tokens.Total(), actual
			}
			img := pngDataURL(t, 1280, 720)
			const n = 12
			for i := range n {
				send(chatBody(t, "Qwen/Qwen3-VL-8B", textMsg("user", strings.Repeat("word ", 50+37*i))))
				send(chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg(strings.Repeat("look ", 20+11*i), img)))
				if i == 0 {
					// One outlier response (a prompt truncated by the engine) must not matter.
					req := parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", textMsg("user", "x")))
					res, _ := s.Schedule(context.Background(), req)
					s.Dispatch(req, res).Finish(profiles.Usage{PromptTokens: 100000, Reported: true})
				}
			}
			for _, body := range [][]byte{
				chatBody(t, "Qwen/Qwen3-VL-8B", textMsg("user", strings.Repeat("fresh text ", 300))),
				chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg(strings.Repeat("new ", 40), img, pngDataURL(t, 200, 300))),
			} {
				est, actual := send(body)
				errFrac := math.Abs(float64(est-actual)) / float64(actual)
				if apply && errFrac > 0.02 {
					t.Fatalf("calibrated estimate %d vs actual %d: %.1f%% off, want ≤ 2%%", est, actual, 100*errFrac)
				}
				if !apply && errFrac < 0.05 {
					t.Fatalf("uncalibrated estimate %d already within %.1f%% of %d: the test does not test calibration", est, 100*errFrac, actual)
				}
			}
			// The learned ratios are exported either way.
			rt := counterValue(t, reg, "spillway_token_calibration_ratio", map[string]string{"model": "Qwen/Qwen3-VL-8B", "kind": "text"})
			ri := counterValue(t, reg, "spillway_token_calibration_ratio", map[string]string{"model": "Qwen/Qwen3-VL-8B", "kind": "image"})
			if math.Abs(rt-1.3) > 0.02 || math.Abs(ri-1.1) > 0.03 {
				t.Fatalf("ratios text %.3f image %.3f, want 1.3 and 1.1", rt, ri)
			}
		})
	}
}

func TestCalibrationRobust(t *testing.T) {
	c := NewCalibration()
	if rt, ri := c.Factors("m"); rt != 1 || ri != 1 {
		t.Fatal("unlearned factors must be 1")
	}
	c.Observe("m", 100, 0, 150)
	c.Observe("m", 100, 0, 150)
	if rt, _ := c.Factors("m"); rt != 1 {
		t.Fatalf("applied after 2 samples: %v", rt)
	}
	c.Observe("m", 100, 0, 150)
	if rt, _ := c.Factors("m"); rt != 1.5 {
		t.Fatalf("after 3: %v", rt)
	}
	// Outliers both ways are clipped and outvoted.
	c.Observe("m", 100, 0, 1e9)
	c.Observe("m", 100, 0, 1)
	c.Observe("m", 100, 0, 150)
	if rt, _ := c.Factors("m"); rt != 1.5 {
		t.Fatalf("outliers moved the median: %v", rt)
	}
	// Zero or missing usage teaches nothing.
	if k, _ := c.Observe("m", 100, 0, 0); k != "" {
		t.Fatal("learned from zero usage")
	}
	// Model names are bounded.
	for i := range MaxCalibratedModels + 10 {
		c.Observe(fmt.Sprintf("model-%d", i), 10, 0, 20)
	}
	if len(c.models) > MaxCalibratedModels+1 {
		t.Fatalf("%d models tracked", len(c.models))
	}
	if c.Key("model-9999") != OtherModel {
		t.Fatal("overflow models share the other label")
	}
}

// A bad image fails scheduling with the 400 the front doors answer, and a
// config without a token-producer gets the implicit one.
func TestSchedulerBadImageIs400(t *testing.T) {
	ep := profiles.NewEndpoint(0, "e", "127.0.0.1:1", nil)
	doc := `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
`
	s, err := profiles.LoadConfigBytes("implicit.yaml", []byte(doc), profiles.Options{Endpoints: profiles.EndpointList{ep}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	req := parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("x", "data:image/jpeg;base64,/9j/AAAA")))
	_, err = s.Schedule(context.Background(), req)
	if profiles.HTTPStatus(err) != http.StatusBadRequest || !strings.Contains(profiles.ClientMessage(err), "messages[0]: image 0: jpeg:") {
		t.Fatalf("got %d %q (%v)", profiles.HTTPStatus(err), profiles.ClientMessage(err), err)
	}
	ok := parse(t, chatBody(t, "Qwen/Qwen3-VL-8B", imageMsg("x", pngDataURL(t, 1280, 720))))
	if _, err := s.Schedule(context.Background(), ok); err != nil || ok.Tokens.Image != 880 || !ok.Tokens.Counted {
		t.Fatalf("implicit producer: %+v %v", ok.Tokens, err)
	}
	// Usage not reported: nothing learned.
	res, _ := s.Schedule(context.Background(), ok)
	s.Dispatch(ok, res).Finish(profiles.Usage{})
	pl, found := s.Plugin(PluginType)
	if !found {
		t.Fatal("implicit token-producer not built")
	}
	cal := pl.(*Producer).Counter().Calibration()
	cal.mu.Lock()
	n := len(cal.models)
	cal.mu.Unlock()
	if n != 0 {
		t.Fatalf("learned from a response without usage (%d models)", n)
	}
	// With usage it learns.
	res, _ = s.Schedule(context.Background(), ok)
	s.Dispatch(ok, res).Finish(profiles.Usage{PromptTokens: 1000, Reported: true})
	if k := cal.Key("Qwen/Qwen3-VL-8B"); k != "Qwen/Qwen3-VL-8B" || len(cal.models) != 1 {
		t.Fatalf("no sample recorded")
	}
}
