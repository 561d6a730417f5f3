package profiles_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spillway-llm/spillway/profiles"
)

// bookingCounter books one unit on the primary target at dispatch and
// releases it on fail/finish, like an in-flight producer.
type bookingCounter struct {
	profiles.Named
	mu     sync.Mutex
	booked map[string]int
}

func (b *bookingCounter) OnDispatch(req *profiles.Request, res *profiles.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := res.Destination()[0]
	b.booked[ep.Name]++
	req.Put("booked-on", ep.Name)
}

func (b *bookingCounter) release(req *profiles.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n, _ := req.Get("booked-on").(string); n != "" {
		b.booked[n]--
		req.Put("booked-on", "")
	}
}

func (b *bookingCounter) OnFinish(req *profiles.Request, _ *profiles.Result, _ profiles.Usage) {
	b.release(req)
}
func (b *bookingCounter) OnFail(req *profiles.Request, _ *profiles.Result, _ error) { b.release(req) }

var theCounter = &bookingCounter{Named: profiles.NewNamed("test-booking-counter", ""), booked: map[string]int{}}

func init() {
	profiles.Register("test-booking-counter", func(string, json.RawMessage, profiles.Handle) (profiles.Plugin, error) {
		return theCounter, nil
	})
}

func TestRetargetMovesBookings(t *testing.T) {
	pool := profiles.EndpointList{
		profiles.NewEndpoint(0, "a", "10.0.0.1:8000", nil),
		profiles.NewEndpoint(1, "b", "10.0.0.2:8000", nil),
	}
	cfg := `apiVersion: llm-d.ai/v1alpha1
plugins:
- type: test-booking-counter
- type: round-robin-picker
  parameters: {maxNumOfEndpoints: 2}
schedulingProfiles:
- name: p
  plugins: [{pluginRef: round-robin-picker}]
`
	s, err := profiles.LoadConfigBytes("rt.yaml", []byte(cfg), profiles.Options{Endpoints: pool})
	require.NoError(t, err)
	defer s.Close()
	req := &profiles.Request{}
	res, err := s.Schedule(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, res.Destination(), 2)
	primary, fallback := res.Destination()[0], res.Destination()[1]
	tr := s.Dispatch(req, res)
	assert.Equal(t, 1, theCounter.booked[primary.Name])

	assert.False(t, tr.Retarget("192.0.2.1:1"), "not a fallback of this request")
	assert.False(t, tr.Retarget(primary.Address), "already the target")
	require.True(t, tr.Retarget(fallback.Address))
	assert.Equal(t, 0, theCounter.booked[primary.Name])
	assert.Equal(t, 1, theCounter.booked[fallback.Name])
	assert.Equal(t, fallback, res.Destination()[0])

	tr.FirstChunk()
	assert.False(t, tr.Retarget(primary.Address), "too late after the first chunk")
	tr.Finish(profiles.Usage{})
	assert.Equal(t, 0, theCounter.booked[primary.Name])
	assert.Equal(t, 0, theCounter.booked[fallback.Name])
}
