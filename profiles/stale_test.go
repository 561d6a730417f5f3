package profiles_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spillway-llm/spillway/profiles"
)

const rrConfig = `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: round-robin-picker
schedulingProfiles:
- name: p
  plugins: [{pluginRef: round-robin-picker}]
`

func TestEndpointsWithFailingScrapesAreLeftOut(t *testing.T) {
	a := profiles.NewEndpoint(0, "a", "10.0.0.1:1", nil)
	b := profiles.NewEndpoint(1, "b", "10.0.0.2:1", nil)
	c := profiles.NewEndpoint(2, "c", "10.0.0.3:1", nil) // never scraped yet: stays eligible
	fresh := &profiles.Metrics{UpdatedAt: time.Now()}
	a.SetMetrics(fresh)
	b.SetMetrics(&profiles.Metrics{Stale: true, Err: "connection refused"})
	pick := func(opts profiles.Options) map[string]int {
		s, err := profiles.LoadConfigBytes("rr.yaml", []byte(rrConfig), opts)
		require.NoError(t, err)
		defer s.Close()
		got := map[string]int{}
		for i := 0; i < 9; i++ {
			res, err := s.Schedule(context.Background(), &profiles.Request{})
			require.NoError(t, err)
			got[res.Destination()[0].Name]++
		}
		return got
	}
	pool := profiles.EndpointList{a, b, c}
	assert.Equal(t, map[string]int{"a": 5, "c": 4}, pick(profiles.Options{Endpoints: pool}))
	assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, pick(profiles.Options{Endpoints: pool, KeepStale: true}))

	// When no endpoint has fresh metrics the scraping is the problem:
	// everything stays eligible.
	a.SetMetrics(&profiles.Metrics{Stale: true, Err: "timeout"})
	assert.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3}, pick(profiles.Options{Endpoints: pool}))
}

// A pool whose every endpoint fails its scrape stays eligible even while
// another pool is fresh: the exclusion never empties a role.
func TestFailingScrapesNeverEmptyAPool(t *testing.T) {
	dec := profiles.NewEndpoint(0, "d", "10.0.0.1:1", map[string]string{profiles.RoleLabel: profiles.RoleDecode})
	pre := profiles.NewEndpoint(1, "p", "10.0.0.2:1", map[string]string{profiles.RoleLabel: profiles.RolePrefill})
	dec.SetMetrics(&profiles.Metrics{Stale: true, Err: "timeout"})
	pre.SetMetrics(&profiles.Metrics{UpdatedAt: time.Now()})
	cfg := `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: decode-filter
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}]
`
	s, err := profiles.LoadConfigBytes("d.yaml", []byte(cfg), profiles.Options{Endpoints: profiles.EndpointList{dec, pre}})
	require.NoError(t, err)
	defer s.Close()
	res, err := s.Schedule(context.Background(), &profiles.Request{})
	require.NoError(t, err)
	assert.Equal(t, "d", res.Destination()[0].Name)
}
