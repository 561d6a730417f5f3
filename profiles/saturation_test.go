package profiles_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spillway-llm/spillway/profiles"
)

const saturationConfig = `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: queue-scorer
saturationDetector:
  queueDepthThreshold: 3
  kvCacheUtilThreshold: 0.9
  metricsStalenessThreshold: 1s
flowControl: {}
featureGates: [flowControl]
schedulingProfiles:
- name: p
  plugins: [{pluginRef: queue-scorer}]
`

func TestSaturationDetectorShedsSheddableRequests(t *testing.T) {
	a := profiles.NewEndpoint(0, "a", "10.0.0.1:1", nil)
	b := profiles.NewEndpoint(1, "b", "10.0.0.2:1", nil)
	s, err := profiles.LoadConfigBytes("sat.yaml", []byte(saturationConfig), profiles.Options{Endpoints: profiles.EndpointList{a, b}})
	require.NoError(t, err)
	defer s.Close()
	assert.Contains(t, s.Describe(), "queueDepthThreshold 3")
	assert.Contains(t, s.Describe(), "accepted but not applied by spillway: featureGates flowControl; flowControl")

	now := time.Now()
	a.SetMetrics(&profiles.Metrics{WaitingQueue: 3, UpdatedAt: now})
	b.SetMetrics(&profiles.Metrics{WaitingQueue: 0, KVUsage: 0.95, UpdatedAt: now})
	low := &profiles.Request{Headers: map[string]string{profiles.PriorityHeader: "-1"}}
	_, err = s.Schedule(context.Background(), low)
	require.Error(t, err)
	assert.Equal(t, 429, profiles.HTTPStatus(err))

	// A request of normal priority is still scheduled on a saturated pool.
	_, err = s.Schedule(context.Background(), &profiles.Request{Headers: map[string]string{}})
	require.NoError(t, err)

	// One endpoint with capacity: nothing is shed.
	b.SetMetrics(&profiles.Metrics{WaitingQueue: 2, KVUsage: 0.5, UpdatedAt: now})
	_, err = s.Schedule(context.Background(), low)
	require.NoError(t, err)

	// Old metrics count as no capacity.
	b.SetMetrics(&profiles.Metrics{WaitingQueue: 0, UpdatedAt: now.Add(-time.Minute)})
	_, err = s.Schedule(context.Background(), low)
	assert.Equal(t, 429, profiles.HTTPStatus(err))
}

func TestSaturationDetectorBadParameters(t *testing.T) {
	cfg := strings.Replace(saturationConfig, "kvCacheUtilThreshold: 0.9", "kvCacheUtilTreshold: 0.9", 1)
	_, err := profiles.LoadConfigBytes("sat.yaml", []byte(cfg), profiles.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kvCacheUtilTreshold")
	assert.Contains(t, err.Error(), "kvCacheUtilThreshold (number)")
}
