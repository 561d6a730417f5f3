package calibrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Entry is one row of the configuration matrix: a measured
// peakPrefillThroughput for one serving path.
type Entry struct {
	Model                 string  `json:"model"`
	Accelerator           string  `json:"accelerator"`
	Engine                string  `json:"engine"`
	TP                    int     `json:"tp"`
	ChunkSize             int     `json:"chunkSize"`
	PeakPrefillThroughput float64 `json:"peakPrefillThroughput"`
	// Optional per-token costs other plugins read (prefill/matrix.go);
	// calibrate keeps them when it replaces a row.
	PrefillCostPerToken *float64 `json:"prefillCostPerToken,omitempty"`
	DecodeCost          *float64 `json:"decodeCost,omitempty"`
	// Per-token costs measured by MeasureDecode (read by costmodel's
	// marginal-cost-scorer and latency-predictor): seconds per prefilled
	// token and the decode step fit step(b) = base + perSeq × b.
	PrefillSecondsPerToken  *float64 `json:"prefillSecondsPerToken,omitempty"`
	DecodeStepBaseSeconds   *float64 `json:"decodeStepBaseSeconds,omitempty"`
	DecodeStepPerSeqSeconds *float64 `json:"decodeStepPerSeqSeconds,omitempty"`
}

// Matrix is deploy/calibration/matrix.yaml.
type Matrix struct {
	Entries []Entry `json:"entries"`
}

// key is what identifies a row; matching ignores case.
func (e Entry) key() string {
	return strings.ToLower(fmt.Sprintf("%s|%s|%s|%d|%d", e.Model, e.Accelerator, e.Engine, e.TP, e.ChunkSize))
}

// Validate checks a row.
func (e Entry) Validate() error {
	switch {
	case e.Model == "" || e.Accelerator == "" || e.Engine == "":
		return errors.New("model, accelerator and engine are required")
	case e.TP < 1:
		return fmt.Errorf("tp must be ≥ 1, got %d", e.TP)
	case e.ChunkSize < 1:
		return fmt.Errorf("chunkSize must be ≥ 1, got %d", e.ChunkSize)
	case !(e.PeakPrefillThroughput > 0):
		return fmt.Errorf("peakPrefillThroughput must be > 0, got %g", e.PeakPrefillThroughput)
	case e.PrefillSecondsPerToken != nil && !(*e.PrefillSecondsPerToken > 0):
		return fmt.Errorf("prefillSecondsPerToken must be > 0, got %g", *e.PrefillSecondsPerToken)
	case e.DecodeStepBaseSeconds != nil && !(*e.DecodeStepBaseSeconds > 0):
		return fmt.Errorf("decodeStepBaseSeconds must be > 0, got %g", *e.DecodeStepBaseSeconds)
	case e.DecodeStepPerSeqSeconds != nil && !(*e.DecodeStepPerSeqSeconds >= 0):
		return fmt.Errorf("decodeStepPerSeqSeconds must be ≥ 0, got %g", *e.DecodeStepPerSeqSeconds)
	}
	return nil
}

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

// ParseMatrix decodes a matrix document strictly.
func ParseMatrix(name string, b []byte) (*Matrix, error) {
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", name, err)
	}
	var m Matrix
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if string(bytes.TrimSpace(js)) != "null" {
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: %v (format: entries: [{model, accelerator, engine, tp, chunkSize, peakPrefillThroughput, prefillCostPerToken?, decodeCost?, prefillSecondsPerToken?, decodeStepBaseSeconds?, decodeStepPerSeqSeconds?}])", name, err)
		}
	}
	seen := map[string]bool{}
	for i, e := range m.Entries {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("%s: entries[%d]: %w", name, i, err)
		}
		if seen[e.key()] {
			return nil, fmt.Errorf("%s: entries[%d]: duplicate row for %s/%s/%s tp%d chunk %d", name, i, e.Model, e.Accelerator, e.Engine, e.TP, e.ChunkSize)
		}
		seen[e.key()] = true
	}
	return &m, nil
}

// Merge replaces the row with e's key, or appends e. It reports whether a
// row was replaced.
func (m *Matrix) Merge(e Entry) (bool, error) {
	if err := e.Validate(); err != nil {
		return false, err
	}
	for i := range m.Entries {
		if m.Entries[i].key() == e.key() {
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
	k := Entry{Model: model, Accelerator: accelerator, Engine: engine, TP: tp, ChunkSize: chunk}.key()
	for _, e := range m.Entries {
		if e.key() == k {
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
