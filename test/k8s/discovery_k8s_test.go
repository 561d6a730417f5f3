//go:build k8s

package k8s_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/discovery/kubernetes"
	"github.com/spillway-llm/spillway/profiles"
)

// running is a Source started against the test API server.
type running struct {
	src     *kubernetes.Source
	store   *discovery.Store
	removed *removals
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan error
}

// removals records the endpoints the store told its listeners to drop
// (which is how producers release in-flight and index state).
type removals struct {
	mu    sync.Mutex
	names []string
}

func (r *removals) OnEndpointAdded(*profiles.Endpoint) {}
func (r *removals) OnEndpointRemoved(e *profiles.Endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, e.Name)
}
func (r *removals) has(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.names, name)
}

func startSource(t *testing.T, cfg kubernetes.Config) *running {
	t.Helper()
	cfg.RestConfig = restCfg
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	src, err := kubernetes.NewPoolSource(cfg)
	require.NoError(t, err)
	r := &running{src: src, store: discovery.NewStore(), removed: &removals{}, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	r.store.Subscribe(r.removed)
	src.Register(r.reg)
	c, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- src.Run(c, r.store) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the source and waits for Run to return (no leaked goroutines).
func (r *running) stop(t *testing.T) {
	r.cancel()
	select {
	case err := <-r.done:
		assert.NoError(t, err)
		r.done <- nil
	case <-time.After(30 * time.Second):
		t.Error("source did not stop")
	}
}

// view is the store's endpoints as "name=address role" strings.
func (r *running) view() []string {
	var out []string
	for _, e := range r.store.Endpoints() {
		out = append(out, fmt.Sprintf("%s=%s %s", e.Name, e.Address, e.Labels[profiles.RoleLabel]))
	}
	return out
}

func (r *running) waitFor(t *testing.T, what string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	var got []string
	eventually(t, fmt.Sprintf("%s: endpoints %v (last seen %v)", what, want, &got), func() bool {
		got = r.view()
		if got == nil {
			got = []string{}
		}
		return r.store.Synced() && slices.Equal(got, want)
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var (
	decodeLbl  = map[string]string{"app": "vllm", profiles.RoleLabel: "decode"}
	prefillLbl = map[string]string{"app": "vllm", profiles.RoleLabel: "prefill"}
)

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestPoolEndpointsFollowPods walks one pool through the life of its pods:
// creation, readiness flips, label changes, deletion, then selector and
// target-port changes on the pool itself and finally its deletion.
func TestPoolEndpointsFollowPods(t *testing.T) {
	ns := newNamespace(t)
	other := newNamespace(t)
	createPod(t, ns, "a", decodeLbl, "127.0.1.1", true)
	createPod(t, ns, "b", prefillLbl, "127.0.1.2", false)
	createPod(t, ns, "c", map[string]string{"app": "sglang"}, "127.0.1.3", true)
	createPod(t, ns, "pending", decodeLbl, "", false) // no IP yet
	// Same labels in another namespace: must never show up (only the pool's
	// namespace is watched).
	createPod(t, other, "a", decodeLbl, "127.0.1.9", true)

	r := startSource(t, kubernetes.Config{Namespace: ns, PoolName: "pool"})
	assert.False(t, r.store.Synced(), "not synced before the pool exists")
	createPool(t, ns, "pool", map[string]string{"app": "vllm"}, 8000)
	r.waitFor(t, "pool created", "a=127.0.1.1:8000 decode")
	assert.True(t, r.src.Synced())
	assert.True(t, r.src.Leader(), "without leader election every replica delivers")
	assert.Equal(t, 1.0, gauge(t, r.reg, "spillway_k8s_endpoints"))

	setPodStatus(t, ns, "b", "127.0.1.2", true)
	r.waitFor(t, "b became ready", "a=127.0.1.1:8000 decode", "b=127.0.1.2:8000 prefill")

	setPodStatus(t, ns, "a", "127.0.1.1", false)
	r.waitFor(t, "a became unready", "b=127.0.1.2:8000 prefill")
	assert.True(t, r.removed.has("a"), "listeners were told to drop a's state")

	createPod(t, ns, "d", decodeLbl, "127.0.1.4", true)
	r.waitFor(t, "d created ready", "b=127.0.1.2:8000 prefill", "d=127.0.1.4:8000 decode")

	// A role change is a new identity: the endpoint is replaced.
	setPodLabels(t, ns, "d", prefillLbl)
	r.waitFor(t, "d relabelled prefill", "b=127.0.1.2:8000 prefill", "d=127.0.1.4:8000 prefill")
	setPodLabels(t, ns, "d", map[string]string{"app": "other"})
	r.waitFor(t, "d left the selector", "b=127.0.1.2:8000 prefill")

	deletePod(t, ns, "b")
	r.waitFor(t, "b deleted")
	assert.True(t, r.removed.has("b"))

	// Selector change: a full resync onto the other pods.
	updatePool(t, ns, "pool", map[string]string{"app": "sglang"}, 8000)
	r.waitFor(t, "selector changed", "c=127.0.1.3:8000 ")
	// Port change (the v1 CRD allows one target port): every address moves.
	updatePool(t, ns, "pool", map[string]string{"app": "sglang"}, 8001)
	r.waitFor(t, "port changed", "c=127.0.1.3:8001 ")
	assert.True(t, r.removed.has("c"), "the old address's state is dropped")
	assert.Equal(t, 1.0, gauge(t, r.reg, "spillway_k8s_endpoints"))

	// A deleted pool routes nowhere, but stays synced (Envoy gets 503s, not
	// a picker that looks down).
	require.NoError(t, k8s.Delete(ctx(t), &inferencev1.InferencePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pool"}}))
	r.waitFor(t, "pool deleted")
	assert.True(t, r.store.Synced())
}

// TestStandaloneSelector runs without an InferencePool: a label selector and
// fixed ports.
func TestStandaloneSelector(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "dec", decodeLbl, "127.0.2.1", true)
	createPod(t, ns, "pre", prefillLbl, "127.0.2.2", true)
	createPod(t, ns, "enc", map[string]string{"app": "vllm", profiles.RoleLabel: "encode"}, "127.0.2.3", true)
	r := startSource(t, kubernetes.Config{Namespace: ns, EndpointSelector: "app=vllm,llm-d.ai/role in (decode,prefill)", TargetPorts: []int32{9000, 9001}})
	r.waitFor(t, "standalone sync",
		"dec-rank-0=127.0.2.1:9000 decode", "dec-rank-1=127.0.2.1:9001 decode",
		"pre-rank-0=127.0.2.2:9000 prefill", "pre-rank-1=127.0.2.2:9001 prefill")
	setPodLabels(t, ns, "enc", map[string]string{"app": "vllm", profiles.RoleLabel: "decode"})
	r.waitFor(t, "enc relabelled into the selector",
		"dec-rank-0=127.0.2.1:9000 decode", "dec-rank-1=127.0.2.1:9001 decode",
		"enc-rank-0=127.0.2.3:9000 decode", "enc-rank-1=127.0.2.3:9001 decode",
		"pre-rank-0=127.0.2.2:9000 prefill", "pre-rank-1=127.0.2.2:9001 prefill")
	deletePod(t, ns, "dec")
	setPodStatus(t, ns, "pre", "127.0.2.2", false)
	r.waitFor(t, "dec deleted, pre unready", "enc-rank-0=127.0.2.3:9000 decode", "enc-rank-1=127.0.2.3:9001 decode")
}

// TestLeaderElection runs two replicas on one Lease: only the leader
// delivers endpoints (and so is ready); when it stops, the other takes over.
func TestLeaderElection(t *testing.T) {
	ns := newNamespace(t)
	createPod(t, ns, "a", decodeLbl, "127.0.3.1", true)
	createPool(t, ns, "pool", map[string]string{"app": "vllm"}, 8000)
	cfg := kubernetes.Config{Namespace: ns, PoolName: "pool", LeaderElection: true,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	r1 := startSource(t, cfg)
	r1.waitFor(t, "first replica leads", "a=127.0.3.1:8000 decode")
	assert.True(t, r1.src.Leader())
	assert.Equal(t, 1.0, gauge(t, r1.reg, "spillway_k8s_leader"))

	r2 := startSource(t, cfg)
	// The follower is running (its cache syncs) but must not deliver.
	createPod(t, ns, "b", decodeLbl, "127.0.3.2", true)
	r1.waitFor(t, "leader sees b", "a=127.0.3.1:8000 decode", "b=127.0.3.2:8000 decode")
	assert.False(t, r2.store.Synced(), "a follower is not ready")
	assert.False(t, r2.src.Leader())

	r1.stop(t) // releases the Lease on cancel
	r2.waitFor(t, "second replica takes over", "a=127.0.3.1:8000 decode", "b=127.0.3.2:8000 decode")
	assert.True(t, r2.src.Leader())
}

// TestForbiddenNamespaceFails: a service account without the Role gets a
// clear error from Run (naming what to grant), not a hang or an empty set.
func TestForbiddenNamespaceFails(t *testing.T) {
	ns := newNamespace(t)
	cfg := *restCfg
	cfg.Impersonate.UserName = "system:serviceaccount:" + ns + ":nobody"
	src, err := kubernetes.NewPoolSource(kubernetes.Config{RestConfig: &cfg, Namespace: ns, PoolName: "pool"})
	require.NoError(t, err)
	store := discovery.NewStore()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Run(c, store)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not allowed")
	assert.Contains(t, err.Error(), "rbac.yaml")
	assert.NoError(t, c.Err(), "failed at once, not at the deadline")
	assert.False(t, store.Synced())
}

// TestStandaloneNeedsNoCRD: with RBAC on pods only (as on a cluster without
// the InferencePool CRD), pool mode fails clearly and standalone mode works.
func TestStandaloneNeedsNoCRD(t *testing.T) {
	ns := newNamespace(t)
	// Only pods are granted: a standalone source must not touch pools.
	require.NoError(t, k8s.Create(ctx(t), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}))
	require.NoError(t, k8s.Create(ctx(t), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pods"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "podsonly", Namespace: ns}}}))
	cfg := *restCfg
	cfg.Impersonate.UserName = "system:serviceaccount:" + ns + ":podsonly"

	// Pool mode with that account: pools are forbidden, a clear error.
	src, err := kubernetes.NewPoolSource(kubernetes.Config{RestConfig: &cfg, Namespace: ns, PoolName: "pool"})
	require.NoError(t, err)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Run(c, discovery.NewStore())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "listing InferencePools")

	// Standalone with the same account works.
	createPod(t, ns, "a", decodeLbl, "127.0.4.1", true)
	src, err = kubernetes.NewPoolSource(kubernetes.Config{RestConfig: &cfg, Namespace: ns, EndpointSelector: "app=vllm", TargetPorts: []int32{8000}})
	require.NoError(t, err)
	store := discovery.NewStore()
	done := make(chan error, 1)
	c2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- src.Run(c2, store) }()
	eventually(t, "standalone synced with pods-only RBAC", func() bool { return store.Synced() && len(store.Endpoints()) == 1 })
	cancel2()
	require.NoError(t, <-done)
}
