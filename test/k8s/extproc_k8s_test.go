//go:build k8s

package k8s_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/discovery/kubernetes"
	"github.com/spillway-llm/spillway/extproc"
)

// pdConfig disaggregates every request: decode picks the destination, the
// prefill profile the x-prefiller-host-port.
const pdConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: prefill-filter
- type: max-score-picker
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: always-disagg-pd-decider
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: max-score-picker}]
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]
`

// picker is a running `spillway serve` equivalent fed by an InferencePool.
type picker struct {
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
}

func startPicker(t *testing.T, ns, pool string) *picker {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "pd.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(pdConfig), 0o644))
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	src, err := kubernetes.NewPoolSource(kubernetes.Config{RestConfig: restCfg, Namespace: ns, PoolName: pool, Logger: log})
	require.NoError(t, err)
	c, cancel := context.WithCancel(context.Background())
	st, err := director.NewStack(c, director.StackOptions{ConfigPath: cfgPath, Source: src, Logger: log})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	runDone, serveDone := make(chan error, 1), make(chan error, 1)
	go func() { runDone <- st.Run(c) }()
	go func() {
		serveDone <- extproc.Serve(c, extproc.NewServer(st.Director, log), extproc.ServeOptions{Listener: ln, Ready: st.Store.Synced, ReadyPoll: 20 * time.Millisecond})
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		cancel()
		for _, ch := range []chan error{runDone, serveDone} {
			select {
			case err := <-ch:
				assert.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Error("picker did not stop")
			}
		}
		st.Close()
	})
	return &picker{client: extprocv3.NewExternalProcessorClient(conn), health: healthpb.NewHealthClient(conn)}
}

func (p *picker) ready(t *testing.T) bool {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := p.health.Check(c, &healthpb.HealthCheckRequest{Service: extproc.HealthReadiness})
	require.NoError(t, err)
	return r.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// route sends one chat request the way Envoy does and returns the routing
// headers of the answer (or the immediate response's status).
func (p *picker) route(t *testing.T) (set map[string]string, status int) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.client.Process(c)
	require.NoError(t, err)
	body := `{"model":"m","messages":[{"role":"user","content":"hello from the gateway"}]}`
	hm := &corev3.HeaderMap{}
	for _, kv := range [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "gw"}, {"content-type", "application/json"}} {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[0], RawValue: []byte(kv[1])})
	}
	require.NoError(t, s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm}}}))
	require.NoError(t, s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}}))
	m, err := s.Recv()
	require.NoError(t, err)
	if im := m.GetImmediateResponse(); im != nil {
		return nil, int(im.GetStatus().GetCode())
	}
	hr := m.GetRequestHeaders()
	require.NotNil(t, hr, "first answer is %T", m.Response)
	set = map[string]string{}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	md := m.GetDynamicMetadata().GetFields()[director.MetadataLB].GetStructValue().GetFields()[director.HeaderDestination].GetStringValue()
	assert.Equal(t, set[director.HeaderDestination], md, "envoy.lb metadata matches the header")
	return set, 200
}

// TestExtProcRoutesByPodRole drives requests through the ext_proc server of
// a picker discovering an InferencePool on the real API server: the
// destination is a decode pod, the prefiller a prefill pod, and both follow
// pods becoming unready, appearing and disappearing.
func TestExtProcRoutesByPodRole(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "dec-1", decodeLbl, "127.0.5.1", true)
	createPod(t, ns, "pre-1", prefillLbl, "127.0.5.2", true)
	p := startPicker(t, ns, "pool")

	// No pool yet: not ready, and requests are refused with 503.
	assert.False(t, p.ready(t), "readiness is NOT_SERVING until the pool has synced")
	createPool(t, ns, "pool", map[string]string{"app": "vllm"}, 8000)
	eventually(t, "picker ready", func() bool { return p.ready(t) })

	set, status := p.route(t)
	require.Equal(t, 200, status)
	assert.Equal(t, "127.0.5.1:8000", set[director.HeaderDestination], "destination is the decode pod")
	assert.Equal(t, "127.0.5.2:8000", set[director.HeaderPrefiller], "prefill leg goes to the prefill pod")

	// The decode pod goes unready and another one appears.
	setPodStatus(t, ns, "dec-1", "127.0.5.1", false)
	createPod(t, ns, "dec-2", decodeLbl, "127.0.5.3", true)
	eventually(t, "routing moves to dec-2", func() bool {
		set, status := p.route(t)
		return status == 200 && set[director.HeaderDestination] == "127.0.5.3:8000" && set[director.HeaderPrefiller] == "127.0.5.2:8000"
	})

	// Without a prefill pod the decode pod prefills itself.
	deletePod(t, ns, "pre-1")
	eventually(t, "decode-only once prefill is gone", func() bool {
		set, status := p.route(t)
		_, hasPrefiller := set[director.HeaderPrefiller]
		return status == 200 && set[director.HeaderDestination] == "127.0.5.3:8000" && !hasPrefiller
	})

	// No decode pod at all: 503.
	deletePod(t, ns, "dec-2")
	eventually(t, "503 without decode pods", func() bool {
		_, status := p.route(t)
		return status == 503
	})
}
