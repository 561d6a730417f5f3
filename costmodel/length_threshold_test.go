package costmodel

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spillway-llm/spillway/profiles"
)

func TestLengthThresholdSeparatesLongRequests(t *testing.T) {
	pool := eps(2)
	cfg := `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: length-threshold-scorer
  parameters: {thresholdTokens: 1000, defaultOutputTokens: 100}
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: length-threshold-scorer}]
`
	s, err := profiles.LoadConfigBytes("lt.yaml", []byte(cfg), profiles.Options{Endpoints: profiles.EndpointList(pool)})
	require.NoError(t, err)
	defer s.Close()
	// Two long requests (max_tokens bounds the prediction, so make the
	// predictor learn long outputs first for prompts of this size).
	p, _ := s.Plugin("length-threshold-scorer")
	lt := p.(*LengthThresholdScorer)
	for i := 0; i < 50; i++ {
		lt.pred.Observe(req("warm", 5000, 0), 4000)
	}
	var trs []*profiles.Tracker
	longOn := map[string]int{}
	for i := 0; i < 2; i++ {
		r := req(fmt.Sprint("long", i), 5000, 0)
		res, err := s.Schedule(context.Background(), r)
		require.NoError(t, err)
		trs = append(trs, s.Dispatch(r, res))
		longOn[res.Destination()[0].Name]++
	}
	assert.Equal(t, map[string]int{"d0": 1, "d1": 1}, longOn, "long requests spread")
	for _, tr := range trs {
		tr.Fail(context.Canceled)
	}
	lt.mu.Lock()
	defer lt.mu.Unlock()
	for _, e := range pool {
		assert.Zero(t, lt.all[e])
		assert.Zero(t, lt.long[e])
	}
}
