package costmodel_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/costmodel"
	"github.com/spillway-llm/spillway/prefill"
	"github.com/spillway-llm/spillway/profiles"
)

// TestDocExamplesLoad loads every config example of docs/costmodel.md (as
// if the file were at the repository root), parses its matrix example and
// checks its worked cost example.
func TestDocExamplesLoad(t *testing.T) {
	doc, err := os.ReadFile("../docs/costmodel.md")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("..")
	var configs, matrices int
	for _, p := range strings.Split(string(doc), "```yaml\n")[1:] {
		block, _, _ := strings.Cut(p, "```")
		switch {
		case strings.HasPrefix(block, "apiVersion:"):
			s, err := profiles.LoadConfigBytes("docs/costmodel.md", []byte(block), profiles.Options{ConfigDir: root})
			if err != nil {
				t.Errorf("example does not load: %v\n%s", err, block)
				continue
			}
			s.Close()
			configs++
		case strings.HasPrefix(block, "entries:"):
			m, err := prefill.ParseMatrix("docs/costmodel.md", []byte(block))
			if err != nil {
				t.Errorf("matrix example: %v", err)
			} else if e := m.Entries[0]; e.DecodeStepBaseSeconds == nil || e.DecodeStepPerSeqSeconds == nil || e.PrefillSecondsPerToken == nil {
				t.Errorf("matrix example lacks the decode costs: %+v", e)
			}
			matrices++
		}
	}
	if configs != 3 || matrices != 1 {
		t.Errorf("found %d config and %d matrix examples, want 3 and 1", configs, matrices)
	}
	// The worked example: 200 predicted tokens, 10 running with 100 to go.
	rem := make([]float64, 10)
	for i := range rem {
		rem[i] = 100
	}
	c := costmodel.DefaultCosts
	busy := c.Price(costmodel.Candidate{Running: 10, Remaining: rem}, costmodel.Work{Output: 200}, 1, 0.8)
	idle := c.Price(costmodel.Candidate{}, costmodel.Work{Output: 200}, 1, 0.8)
	if math.Abs(busy.Own-2.928) > 1e-9 || math.Abs(busy.Imposed-0.24) > 1e-9 || math.Abs(busy.Total-3.168) > 1e-9 || math.Abs(idle.Total-2.448) > 1e-9 {
		t.Errorf("worked example: busy %+v idle %+v", busy, idle)
	}
	if !strings.Contains(string(doc), "2.448 / 3.168 = 0.77") {
		t.Error("docs lost the worked example")
	}
}
