package tokenproducer

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/spillway-llm/spillway/profiles"
)

func pngDataURL(t testing.TB, w, h int) string {
	m := image.NewGray(image.Rect(0, 0, w, h))
	for i := range m.Pix {
		m.Pix[i] = uint8(i * 7)
	}
	m.Set(0, 0, color.Gray{1})
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes())
}

type part = map[string]any

func chatBody(t testing.TB, model string, msgs ...map[string]any) []byte {
	b, err := json.Marshal(map[string]any{"model": model, "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func textMsg(role, text string) map[string]any { return map[string]any{"role": role, "content": text} }

func imageMsg(text string, urls ...string) map[string]any {
	parts := []any{part{"type": "text", "text": text}}
	for _, u := range urls {
		parts = append(parts, part{"type": "image_url", "image_url": part{"url": u}})
	}
	return map[string]any{"role": "user", "content": parts}
}

func parse(t testing.TB, body []byte) *profiles.Request {
	t.Helper()
	r, err := profiles.ParseRequest(profiles.PathChatCompletions, map[string]string{}, body)
	if err != nil {
		t.Fatalf("ParseRequest: %v", err)
	}
	return r
}

func newCounter(t testing.TB, params string, reg prometheus.Registerer) *Counter {
	t.Helper()
	var p Params
	if params != "" {
		if err := profiles.DecodeParams(json.RawMessage(params), &p); err != nil {
			t.Fatalf("DecodeParams: %v", err)
		}
	}
	c, err := New(p, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func counterValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return 0
}

var _ = testutil.ToFloat64
var _ = strings.Contains
