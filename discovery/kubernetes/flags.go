package kubernetes

import (
	"os"
	"time"

	"github.com/spf13/pflag"
)

// Flags are the command-line options of Kubernetes discovery, shared by the
// commands that pick endpoints (serve, gateway).
type Flags struct {
	PoolName         string
	PoolNamespace    string
	EndpointSelector string
	TargetPorts      []int32
	Kubeconfig       string
	LeaderElect      bool
	LeaderElectionID string
	LeaseDuration    time.Duration
	RenewDeadline    time.Duration
	RetryPeriod      time.Duration
}

// DefaultNamespace is the namespace used when --pool-namespace is not given:
// $POD_NAMESPACE (set from the downward API in deploy/), else "default".
func DefaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// AddTo registers all the flags on fs: discovery and leader election (for
// the picker).
func (f *Flags) AddTo(fs *pflag.FlagSet) {
	f.AddDiscoveryTo(fs)
	f.AddLeaderElectionTo(fs)
}

// AddDiscoveryTo registers only what selects the endpoints (pool or
// selector, namespace, kubeconfig), for commands that follow a pool without
// being its picker, such as the decode sidecar's allow-list.
func (f *Flags) AddDiscoveryTo(fs *pflag.FlagSet) {
	fs.StringVar(&f.PoolName, "pool-name", "", "InferencePool (inference.networking.k8s.io/v1) whose selected pods are the endpoints: one per ready pod per spec.targetPorts entry, role from the llm-d.ai/role pod label")
	fs.StringVar(&f.PoolNamespace, "pool-namespace", DefaultNamespace(), "namespace of the InferencePool (or of the --endpoint-selector pods); the only namespace watched (default $POD_NAMESPACE or \"default\")")
	fs.StringVar(&f.EndpointSelector, "endpoint-selector", "", "standalone mode without the InferencePool CRD: label selector of the model-server pods (kubectl syntax, e.g. \"app=vllm\"); needs --endpoint-target-ports")
	fs.Int32SliceVar(&f.TargetPorts, "endpoint-target-ports", nil, "standalone mode: model-server port(s) of each selected pod, comma-separated (e.g. 8000 or 8000,8001)")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file for Kubernetes discovery (default: in-cluster service account, $KUBECONFIG or ~/.kube/config)")
}

// AddLeaderElectionTo registers the leader-election flags.
func (f *Flags) AddLeaderElectionTo(fs *pflag.FlagSet) {
	fs.BoolVar(&f.LeaderElect, "leader-elect", false, "active-passive replicas: only the holder of a Lease in the pool namespace delivers endpoints and reports ready; losing it exits the process")
	fs.StringVar(&f.LeaderElectionID, "leader-election-id", "", "name of the leader-election Lease (default \"spillway-<pool-name>\")")
	fs.DurationVar(&f.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "how long followers wait before taking over a Lease that is not renewed")
	fs.DurationVar(&f.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up leadership")
	fs.DurationVar(&f.RetryPeriod, "leader-election-retry-period", 2*time.Second, "how often leader-election actions are retried")
}

// Enabled reports whether the flags ask for Kubernetes discovery.
func (f *Flags) Enabled() bool { return f.PoolName != "" || f.EndpointSelector != "" }

// Config converts the flags (RestConfig is resolved by NewPoolSource from
// Kubeconfig or the environment).
func (f *Flags) Config() Config {
	return Config{
		Kubeconfig:       f.Kubeconfig,
		Namespace:        f.PoolNamespace,
		PoolName:         f.PoolName,
		EndpointSelector: f.EndpointSelector,
		TargetPorts:      f.TargetPorts,
		LeaderElection:   f.LeaderElect,
		LeaderElectionID: f.LeaderElectionID,
		LeaseDuration:    f.LeaseDuration,
		RenewDeadline:    f.RenewDeadline,
		RetryPeriod:      f.RetryPeriod,
	}
}
