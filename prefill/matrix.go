package prefill

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// MatrixEntry is one row of the calibration matrix
// (deploy/calibration/matrix.yaml): measured costs of one serving path.
type MatrixEntry struct {
	Model                 string   `json:"model"`
	Accelerator           string   `json:"accelerator"`
	Engine                string   `json:"engine"`
	TP                    int      `json:"tp"`
	ChunkSize             int      `json:"chunkSize"`
	PeakPrefillThroughput float64  `json:"peakPrefillThroughput"`
	PrefillCostPerToken   *float64 `json:"prefillCostPerToken,omitempty"`
	DecodeCost            *float64 `json:"decodeCost,omitempty"`
	// Calibrated per-token costs of the marginal-cost scorer and the latency
	// predictor (costmodel), written by `spillway calibrate --decode`:
	// seconds per prefilled token, and a decode step's time as
	// decodeStepBaseSeconds + decodeStepPerSeqSeconds × batch size.
	PrefillSecondsPerToken  *float64 `json:"prefillSecondsPerToken,omitempty"`
	DecodeStepBaseSeconds   *float64 `json:"decodeStepBaseSeconds,omitempty"`
	DecodeStepPerSeqSeconds *float64 `json:"decodeStepPerSeqSeconds,omitempty"`
}

// Fingerprint selects a matrix row; strings match case-insensitively.
type Fingerprint struct {
	Model       string `json:"model"`
	Accelerator string `json:"accelerator"`
	Engine      string `json:"engine"`
	TP          int    `json:"tp"`
	ChunkSize   int    `json:"chunkSize"`
}

func (f Fingerprint) String() string {
	return fmt.Sprintf("{model %s, accelerator %s, engine %s, tp %d, chunkSize %d}", f.Model, f.Accelerator, f.Engine, f.TP, f.ChunkSize)
}

// Matrix is the calibration matrix file.
type Matrix struct {
	Entries []MatrixEntry `json:"entries"`
}

// ParseMatrix decodes a matrix document strictly and validates every row.
func ParseMatrix(name string, data []byte) (*Matrix, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", name, err)
	}
	var m Matrix
	if t := bytes.TrimSpace(js); len(t) > 0 && string(t) != "null" {
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s: %v (schema: entries: [{model, accelerator, engine, tp, chunkSize, peakPrefillThroughput, prefillCostPerToken?, decodeCost?, prefillSecondsPerToken?, decodeStepBaseSeconds?, decodeStepPerSeqSeconds?}])", name, err)
		}
	}
	seen := map[Fingerprint]int{}
	for i, e := range m.Entries {
		if err := e.Validate(); err != nil {
			return nil, fmt.Errorf("%s: entries[%d]: %w", name, i, err)
		}
		k := e.Fingerprint().Normalized()
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("%s: entries[%d] duplicates entries[%d] %s", name, i, j, e.Fingerprint())
		}
		seen[k] = i
	}
	return &m, nil
}

// LoadMatrix reads a matrix file; a relative path is taken from dir (the
// config file's directory).
func LoadMatrix(dir, path string) (*Matrix, string, error) {
	if !filepath.IsAbs(path) && dir != "" {
		path = filepath.Join(dir, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, path, fmt.Errorf("reading calibration matrix: %w", err)
	}
	m, err := ParseMatrix(path, data)
	return m, path, err
}

// Validate checks one row: the serving-path keys, a positive throughput and,
// when present, positive costs.
func (e MatrixEntry) Validate() error {
	switch {
	case e.Model == "" || e.Accelerator == "" || e.Engine == "":
		return fmt.Errorf("model, accelerator and engine are required")
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

// Fingerprint returns the row's serving-path key.
func (e MatrixEntry) Fingerprint() Fingerprint {
	return Fingerprint{Model: e.Model, Accelerator: e.Accelerator, Engine: e.Engine, TP: e.TP, ChunkSize: e.ChunkSize}
}

// Normalized returns f with its strings lower-cased, as rows are matched.
func (f Fingerprint) Normalized() Fingerprint {
	f.Model, f.Accelerator, f.Engine = strings.ToLower(f.Model), strings.ToLower(f.Accelerator), strings.ToLower(f.Engine)
	return f
}

// Lookup returns the row matching every field of f.
func (m *Matrix) Lookup(f Fingerprint) (MatrixEntry, error) {
	want := f.Normalized()
	for _, e := range m.Entries {
		if e.Fingerprint().Normalized() == want {
			return e, nil
		}
	}
	var have []string
	for _, e := range m.Entries {
		have = append(have, e.Fingerprint().String())
	}
	return MatrixEntry{}, fmt.Errorf("no calibration entry for %s (entries: %s); run `spillway calibrate` for this path or set peakPrefillThroughput", f, strings.Join(have, ", "))
}
