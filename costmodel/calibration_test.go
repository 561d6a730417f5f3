package costmodel

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spillway-llm/spillway/profiles"
)

const testMatrix = `entries:
- {model: M, accelerator: H100, engine: vLLM, tp: 2, chunkSize: 8192, peakPrefillThroughput: 16000, decodeStepBaseSeconds: 0.02, decodeStepPerSeqSeconds: 0.0005}
- {model: M, accelerator: H200, engine: vLLM, tp: 2, chunkSize: 8192, peakPrefillThroughput: 16000, prefillSecondsPerToken: 0.00005, decodeStepBaseSeconds: 0.01, decodeStepPerSeqSeconds: 0.0001}
- {model: M, accelerator: A40, engine: vLLM, tp: 1, chunkSize: 2048, peakPrefillThroughput: 4000}
`

func loadWithMatrix(t *testing.T, plugin, params string) (*profiles.Scheduler, error) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "matrix.yaml"), []byte(testMatrix), 0o644))
	cfg := fmt.Sprintf(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: %s
  name: p
  parameters: %s
- type: max-score-picker
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: max-score-picker}]
`, plugin, params)
	s, err := profiles.LoadConfigBytes("test.yaml", []byte(cfg), profiles.Options{ConfigDir: dir, Endpoints: profiles.EndpointList(eps(2))})
	if err == nil {
		t.Cleanup(s.Close)
	}
	return s, err
}

func TestCostsFromCalibrationMatrix(t *testing.T) {
	s, err := loadWithMatrix(t, "marginal-cost-scorer", `{calibrationMatrix: matrix.yaml, fingerprint: {model: m, accelerator: h100, engine: VLLM, tp: 2, chunkSize: 8192}}`)
	require.NoError(t, err)
	p, _ := s.Plugin("p")
	mp := p.(*MarginalCostScorer).p
	// No prefillSecondsPerToken in the row: 1 / peakPrefillThroughput.
	assert.Equal(t, Costs{PrefillSecondsPerToken: 1.0 / 16000, DecodeStepBaseSeconds: 0.02, DecodeStepPerSeqSeconds: 0.0005}, mp.Costs)
	assert.True(t, strings.HasSuffix(mp.CostSource, "matrix.yaml"), mp.CostSource)

	s, err = loadWithMatrix(t, "latency-predictor", `{calibrationMatrix: matrix.yaml, fingerprint: {model: M, accelerator: H200, engine: vLLM, tp: 2, chunkSize: 8192}}`)
	require.NoError(t, err)
	p, _ = s.Plugin("p")
	lp := p.(*LatencyPredictor)
	assert.Equal(t, Costs{PrefillSecondsPerToken: 0.00005, DecodeStepBaseSeconds: 0.01, DecodeStepPerSeqSeconds: 0.0001}, lp.p.Costs)
	// The prior TPOT at one running sequence is step(1) from the row.
	assert.InDelta(t, 0.0101, lp.tpotB[0], 1e-12)
}

func TestCalibrationMatrixErrors(t *testing.T) {
	for _, tc := range []struct{ params, want string }{
		{`{calibrationMatrix: matrix.yaml}`, "go together"},
		{`{fingerprint: {model: M, accelerator: H100, engine: vLLM, tp: 2, chunkSize: 8192}}`, "go together"},
		{`{calibrationMatrix: matrix.yaml, fingerprint: {model: M, accelerator: H100, engine: vLLM, tp: 2, chunkSize: 8192}, decodeStepBaseSeconds: 0.01}`, "both set"},
		{`{calibrationMatrix: matrix.yaml, fingerprint: {model: M, accelerator: B200, engine: vLLM, tp: 2, chunkSize: 8192}}`, "no calibration entry"},
		{`{calibrationMatrix: matrix.yaml, fingerprint: {model: M, accelerator: A40, engine: vLLM, tp: 1, chunkSize: 2048}}`, "calibrate --decode"},
		{`{calibrationMatrix: missing.yaml, fingerprint: {model: M, accelerator: A40, engine: vLLM, tp: 1, chunkSize: 2048}}`, "reading calibration matrix"},
		{`{costSource: x}`, "reported, not set"},
		{`{guard: {maxImbalance: -1}}`, "≥ 0"},
	} {
		for _, plugin := range []string{"marginal-cost-scorer", "latency-predictor"} {
			if plugin == "latency-predictor" && strings.Contains(tc.params, "guard") {
				continue
			}
			_, err := loadWithMatrix(t, plugin, tc.params)
			if assert.Error(t, err, "%s %s", plugin, tc.params) {
				assert.Contains(t, err.Error(), tc.want, "%s %s", plugin, tc.params)
			}
		}
	}
}

func TestDefaultCostsMatchSimulatorProfile(t *testing.T) {
	// docs/sim.md, qwen3-32b-h100: B / T(B) = 8192 / 0.4 s; TPOT at ~1k
	// context 12.2 ms (1 stream), 19.6 ms (32), 26.9 ms (64).
	assert.InDelta(t, 1.0/20480, DefaultCosts.PrefillSecondsPerToken, 1e-12)
	for _, c := range []struct {
		b    int
		tpot float64
	}{{1, 0.0122}, {32, 0.0196}, {64, 0.0269}} {
		assert.InDelta(t, c.tpot, DefaultCosts.Step(c.b), 0.0005, "step(%d)", c.b) // the table rounds "~1k" context
	}
}
