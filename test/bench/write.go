package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// WriteDir writes results.json and report.html into dir (created if
// needed) and returns the report's path.
func (r *Results) WriteDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating output directory: %w", err)
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("writing results.json: %w", err)
	}
	var b bytes.Buffer
	if err := r.WriteReport(&b); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "report.html")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("writing report.html: %w", err)
	}
	return p, nil
}

// ReadResults loads a results.json.
func ReadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading results: %w", err)
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("%s: schemaVersion %d, this build reads %d", path, r.SchemaVersion, SchemaVersion)
	}
	return &r, nil
}
