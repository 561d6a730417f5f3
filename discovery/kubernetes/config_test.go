package kubernetes

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

func TestConfigErrors(t *testing.T) {
	rc := &rest.Config{Host: "http://127.0.0.1:1"}
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no namespace", Config{PoolName: "p"}, "namespace is required"},
		{"bad namespace", Config{Namespace: "Bad_NS", PoolName: "p"}, "namespace \"Bad_NS\""},
		{"nothing", Config{Namespace: "ns"}, "give --pool-name"},
		{"both", Config{Namespace: "ns", PoolName: "p", EndpointSelector: "app=x"}, "exclusive"},
		{"pool with ports", Config{Namespace: "ns", PoolName: "p", TargetPorts: []int32{8000}}, "standalone mode"},
		{"bad pool name", Config{Namespace: "ns", PoolName: "P!"}, "pool name"},
		{"bad selector", Config{Namespace: "ns", EndpointSelector: "app in (", TargetPorts: []int32{1}}, "--endpoint-selector"},
		{"everything selector", Config{Namespace: "ns", EndpointSelector: " ", TargetPorts: []int32{1}}, "every pod"},
		{"no ports", Config{Namespace: "ns", EndpointSelector: "app=x"}, "--endpoint-target-ports is required"},
		{"port range", Config{Namespace: "ns", EndpointSelector: "app=x", TargetPorts: []int32{0}}, "out of range"},
		{"port twice", Config{Namespace: "ns", EndpointSelector: "app=x", TargetPorts: []int32{8000, 8000}}, "given twice"},
		{"lease order", Config{Namespace: "ns", PoolName: "p", LeaderElection: true, LeaseDuration: time.Second, RenewDeadline: 2 * time.Second}, "shorter than the lease"},
		{"retry order", Config{Namespace: "ns", PoolName: "p", LeaderElection: true, RenewDeadline: time.Second, RetryPeriod: time.Second}, "shorter than the renew"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.RestConfig = rc
			_, err := NewPoolSource(c.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestConfigValid(t *testing.T) {
	rc := &rest.Config{Host: "http://127.0.0.1:1"}
	s, err := NewPoolSource(Config{RestConfig: rc, Namespace: "ns", PoolName: "pool"})
	require.NoError(t, err)
	assert.Nil(t, s.standalone)
	assert.Equal(t, "spillway-pool", s.cfg.leaseID())
	assert.False(t, s.Synced())

	s, err = NewPoolSource(Config{RestConfig: rc, Namespace: "ns", EndpointSelector: "app=vllm,llm-d.ai/role in (decode,prefill)", TargetPorts: []int32{8000, 8001}})
	require.NoError(t, err)
	require.NotNil(t, s.standalone)
	assert.Equal(t, []int32{8000, 8001}, s.standalone.ports)
	assert.True(t, s.standalone.selector.Matches(mapLabels{"app": "vllm", "llm-d.ai/role": "prefill"}))
	assert.False(t, s.standalone.selector.Matches(mapLabels{"app": "vllm", "llm-d.ai/role": "encode"}))
	assert.Equal(t, "spillway-endpoints", s.cfg.leaseID())
}

func TestConfigBadKubeconfig(t *testing.T) {
	_, err := NewPoolSource(Config{Kubeconfig: t.TempDir() + "/missing", Namespace: "ns", PoolName: "p"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubeconfig")
}

type mapLabels map[string]string

func (m mapLabels) Has(k string) bool              { _, ok := m[k]; return ok }
func (m mapLabels) Get(k string) string            { return m[k] }
func (m mapLabels) Lookup(k string) (string, bool) { v, ok := m[k]; return v, ok }

func TestFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "llm")
	var f Flags
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	f.AddTo(fs)
	assert.False(t, f.Enabled())
	require.NoError(t, fs.Parse([]string{"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000,8001", "--leader-elect"}))
	assert.True(t, f.Enabled())
	c := f.Config()
	assert.Equal(t, "llm", c.Namespace, "namespace defaults to $POD_NAMESPACE")
	assert.Equal(t, []int32{8000, 8001}, c.TargetPorts)
	assert.True(t, c.LeaderElection)
	assert.Equal(t, 15*time.Second, c.LeaseDuration)
	c.RestConfig = &rest.Config{Host: "http://127.0.0.1:1"}
	_, err := NewPoolSource(c)
	require.NoError(t, err, "the flag defaults are a valid leader-election config")

	fs3 := pflag.NewFlagSet("z", pflag.ContinueOnError)
	var h Flags
	h.AddDiscoveryTo(fs3)
	assert.Nil(t, fs3.Lookup("leader-elect"), "a sidecar gets no leader-election flags")
	require.NoError(t, fs3.Parse([]string{"--pool-name", "p", "--pool-namespace", "ns"}))
	assert.Equal(t, Config{Namespace: "ns", PoolName: "p"}, h.Config())

	fs2 := pflag.NewFlagSet("y", pflag.ContinueOnError)
	var g Flags
	g.AddTo(fs2)
	assert.Error(t, fs2.Parse([]string{"--endpoint-target-ports", "http"}), "non-numeric ports are rejected by the flag parser")
}
