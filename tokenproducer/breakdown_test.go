package tokenproducer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExplainAndConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "epp.yaml")
	doc := `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters:
    imageTokenCost: 2
    models:
      my-vl: {family: qwen3-vl}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
`
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := ParamsFromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := chatBody(t, "ignored", imageMsg("hello", pngDataURL(t, 1280, 720), "https://x.invalid/a.png"))
	b, err := c.Explain(context.Background(), body, "my-vl")
	if err != nil {
		t.Fatal(err)
	}
	if b.Model != "my-vl" || b.Family != FamilyQwen3VL || len(b.Images) != 2 || b.Images[0].Tokens != 880 || b.Images[0].Width != 1280 ||
		!b.Images[1].Default || b.Total != b.TextTokens+b.ImageTokens || b.Weighted != float64(b.TextTokens+2*b.ImageTokens) || b.Backend != BackendEstimate {
		t.Fatalf("breakdown %+v", b)
	}
	// Bad parameters in the file are reported with the file name.
	if err := os.WriteFile(cfg, []byte(strings.Replace(doc, "imageTokenCost: 2", "imageTokenCosts: 2", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParamsFromConfig(cfg); err == nil || !strings.Contains(err.Error(), `unknown parameter "imageTokenCosts"`) {
		t.Fatalf("got %v", err)
	}
	if _, err := c.Explain(context.Background(), []byte(`[1]`), ""); err == nil {
		t.Fatal("non-object body accepted")
	}
}
