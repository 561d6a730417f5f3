package calibrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/spillway-llm/spillway/prefill"
)

// Entry is one row of the configuration matrix; its schema and validation
// live with the reader (prefill.MatrixEntry).
type Entry = prefill.MatrixEntry

// Matrix is deploy/calibration/matrix.yaml, as calibrate edits it.
type Matrix struct {
	Entries []Entry `json:"entries"`
}

// entryKey is what identifies a row; matching ignores case.
func entryKey(e Entry) prefill.Fingerprint { return e.Fingerprint().Normalized() }

// ReadMatrix reads a matrix file; a missing file is an empty matrix.
func ReadMatrix(path string) (*Matrix, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Matrix{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading matrix: %w", err)
	}
	return ParseMatrix(path, b)
}

// ParseMatrix decodes a matrix document strictly (prefill.ParseMatrix, the
// reader's own rules).
func ParseMatrix(name string, b []byte) (*Matrix, error) {
	pm, err := prefill.ParseMatrix(name, b)
	if err != nil {
		return nil, err
	}
	return &Matrix{Entries: pm.Entries}, nil
}

// Merge replaces the row with e's key, or appends e. It reports whether a
// row was replaced.
func (m *Matrix) Merge(e Entry) (bool, error) {
	if err := e.Validate(); err != nil {
		return false, err
	}
	for i := range m.Entries {
		if entryKey(m.Entries[i]) == entryKey(e) {
			if e.PrefillCostPerToken == nil {
				e.PrefillCostPerToken = m.Entries[i].PrefillCostPerToken
			}
			old := m.Entries[i]
			for _, f := range []struct{ dst, src **float64 }{
				{&e.DecodeCost, &old.DecodeCost},
				{&e.PrefillSecondsPerToken, &old.PrefillSecondsPerToken},
				{&e.DecodeStepBaseSeconds, &old.DecodeStepBaseSeconds},
				{&e.DecodeStepPerSeqSeconds, &old.DecodeStepPerSeqSeconds},
			} {
				if *f.dst == nil {
					*f.dst = *f.src
				}
			}
			m.Entries[i] = e
			return true, nil
		}
	}
	m.Entries = append(m.Entries, e)
	return false, nil
}

// Lookup returns the row for a serving path.
func (m *Matrix) Lookup(model, accelerator, engine string, tp, chunk int) (Entry, bool) {
	k := entryKey(Entry{Model: model, Accelerator: accelerator, Engine: engine, TP: tp, ChunkSize: chunk})
	for _, e := range m.Entries {
		if entryKey(e) == k {
			return e, true
		}
	}
	return Entry{}, false
}

const matrixHeader = `# peakPrefillThroughput (tokens/s) per serving path, read by
# prefix-cache-affinity-filter (calibrationMatrix + fingerprint); optional
# prefillSecondsPerToken / decodeStepBaseSeconds / decodeStepPerSeqSeconds
# (written by --decode) are read by marginal-cost-scorer and latency-predictor. Written by
# ` + "`spillway calibrate --write-matrix`" + `; peakPrefillThroughput = chunkSize / median TTFT
# of cache-missing prompts of exactly chunkSize tokens, after warm-up.
# Re-measure after changing the model, accelerator, engine, TP, chunk size
# or quantization.
`

// WriteMatrix writes the matrix atomically (temp file + rename).
func WriteMatrix(path string, m *Matrix) error {
	js, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encoding matrix: %w", err)
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return fmt.Errorf("encoding matrix: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing matrix: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".matrix-*.yaml")
	if err != nil {
		return fmt.Errorf("writing matrix: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(matrixHeader + string(y)); err != nil {
		tmp.Close()
		return fmt.Errorf("writing matrix: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing matrix: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing matrix: %w", err)
	}
	return nil
}
