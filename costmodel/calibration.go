package costmodel

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spillway-llm/spillway/prefill"
)

// CalibrationRef names a calibration-matrix row to take the costs from
// instead of literal prefillSecondsPerToken / decodeStep* parameters. The
// semantics are prefix-cache-affinity-filter's: a relative path is taken
// from the configuration file's directory, the fingerprint {model,
// accelerator, engine, tp, chunkSize} must match one row exactly (strings
// case-insensitively), and a matrix together with literal costs is an error.
type CalibrationRef struct {
	CalibrationMatrix string               `json:"calibrationMatrix,omitempty"`
	Fingerprint       *prefill.Fingerprint `json:"fingerprint,omitempty"`
}

var costKeys = []string{"prefillSecondsPerToken", "decodeStepBaseSeconds", "decodeStepPerSeqSeconds"}

// resolveCosts returns the costs a plugin should use: literal (or default)
// ones when ref names no matrix, else the matrix row's. raw is the plugin's
// parameters, checked for literal costs given alongside a matrix.
func (ref CalibrationRef) resolveCosts(dir string, literal Costs, raw json.RawMessage) (Costs, string, error) {
	if (ref.CalibrationMatrix == "") != (ref.Fingerprint == nil) {
		return Costs{}, "", errors.New("calibrationMatrix and fingerprint go together (fingerprint {model, accelerator, engine, tp, chunkSize} selects the matrix row)")
	}
	if ref.CalibrationMatrix == "" {
		return literal, "parameters", literal.Validate()
	}
	var keys map[string]json.RawMessage
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &keys) // DecodeParams already rejected malformed parameters
	}
	for _, k := range costKeys {
		if _, ok := keys[k]; ok {
			return Costs{}, "", fmt.Errorf("%s and calibrationMatrix both set: give the measured costs or the matrix row, not both", k)
		}
	}
	m, path, err := prefill.LoadMatrix(dir, ref.CalibrationMatrix)
	if err != nil {
		return Costs{}, "", err
	}
	e, err := m.Lookup(*ref.Fingerprint)
	if err != nil {
		return Costs{}, "", fmt.Errorf("%s: %w", path, err)
	}
	return costsFromEntry(path, e)
}

// costsFromEntry reads the per-token costs of a matrix row. A row without
// prefillSecondsPerToken uses 1 / peakPrefillThroughput (the same
// measurement); the decode step fit has no such fallback.
func costsFromEntry(path string, e prefill.MatrixEntry) (Costs, string, error) {
	if e.DecodeStepBaseSeconds == nil || e.DecodeStepPerSeqSeconds == nil {
		return Costs{}, "", fmt.Errorf("%s: row %s/%s/%s tp%d has no decodeStepBaseSeconds/decodeStepPerSeqSeconds; run `spillway calibrate --decode --write-matrix` for this path or give the costs as parameters",
			path, e.Model, e.Accelerator, e.Engine, e.TP)
	}
	c := Costs{PrefillSecondsPerToken: 1 / e.PeakPrefillThroughput, DecodeStepBaseSeconds: *e.DecodeStepBaseSeconds, DecodeStepPerSeqSeconds: *e.DecodeStepPerSeqSeconds}
	if e.PrefillSecondsPerToken != nil {
		c.PrefillSecondsPerToken = *e.PrefillSecondsPerToken
	}
	if err := c.Validate(); err != nil {
		return Costs{}, "", fmt.Errorf("%s: %w", path, err)
	}
	return c, path, nil
}
