package prefill_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// TestDocExamplesLoad loads every config example of docs/prefill.md (as if
// the file were at the repository root) and parses its matrix schema
// example.
func TestDocExamplesLoad(t *testing.T) {
	doc, err := os.ReadFile("../docs/prefill.md")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("..")
	var configs, matrices int
	parts := strings.Split(string(doc), "```yaml\n")
	for _, p := range parts[1:] {
		block, _, _ := strings.Cut(p, "```")
		switch {
		case strings.HasPrefix(block, "apiVersion:"):
			if strings.Contains(block, "calibrationMatrix: deploy/calibration/matrix.yaml") {
				if _, err := os.Stat(filepath.Join(root, "deploy/calibration/matrix.yaml")); err != nil {
					t.Logf("skipping the matrix example: %v", err)
					continue
				}
			}
			s, err := profiles.LoadConfigBytes("docs/prefill.md", []byte(block), profiles.Options{ConfigDir: root})
			if err != nil {
				t.Errorf("example does not load: %v\n%s", err, block)
				continue
			}
			if strings.Contains(block, "calibrationMatrix") && !strings.Contains(s.Describe(), "τ = 286,704 tokens = 35.0 chunks of 8192 ≈ 18.0 s at 15,928 tok/s (peakPrefillThroughput from deploy/calibration/matrix.yaml)") {
				t.Errorf("matrix example describes:\n%s", s.Describe())
			}
			if strings.Contains(block, "peakPrefillThroughput: 20480") && !strings.Contains(s.Describe(), "τ = 286,720 tokens = 35 chunks of 8192 ≈ 14.0 s at 20,480 tok/s") {
				t.Errorf("matched example describes:\n%s", s.Describe())
			}
			s.Close()
			configs++
		case strings.HasPrefix(block, "entries:"):
			if _, err := prefill.ParseMatrix("docs/prefill.md", []byte(block)); err != nil {
				t.Errorf("matrix schema example: %v", err)
			}
			matrices++
		}
	}
	if configs < 3 || matrices != 1 {
		t.Errorf("found %d config and %d matrix examples", configs, matrices)
	}
}
