package kubernetes

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

// Config selects what a Source watches. Exactly one of PoolName (watch an
// InferencePool) and EndpointSelector (standalone, no CRD) is set.
type Config struct {
	// RestConfig reaches the API server. Nil: the usual lookup (KUBECONFIG,
	// in-cluster service account, ~/.kube/config), or Kubeconfig when set.
	RestConfig *rest.Config
	// Kubeconfig is a kubeconfig file used when RestConfig is nil.
	Kubeconfig string

	// Namespace holds the pool (or the standalone pods); only this
	// namespace is cached. Required.
	Namespace string
	// PoolName is the InferencePool (inference.networking.k8s.io/v1) whose
	// selector and targetPorts define the endpoints.
	PoolName string

	// EndpointSelector is a label selector (kubectl syntax, e.g.
	// "app=vllm,llm-d.ai/role in (prefill,decode)") for standalone mode.
	EndpointSelector string
	// TargetPorts are the model-server ports of each selected pod in
	// standalone mode (one endpoint per ready pod per port).
	TargetPorts []int32

	// LeaderElection makes the source active-passive: only the replica
	// holding the Lease delivers endpoints (and so becomes ready); losing
	// it makes Run return an error so the process restarts as a follower.
	LeaderElection bool
	// LeaderElectionID names the Lease; default "spillway-<pool>" (or
	// "spillway-endpoints" in standalone mode).
	LeaderElectionID string
	// LeaderElectionNamespace holds the Lease; default Namespace.
	LeaderElectionNamespace string
	// Lease timings; client defaults (15s, 10s, 2s) when zero.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// Logger receives discovery logs; slog.Default() when nil.
	Logger *slog.Logger
}

// validate checks the config and returns the parsed target for standalone
// mode (nil in pool mode, whose target comes from the pool).
func (c *Config) validate() (*target, error) {
	if c.Namespace == "" {
		return nil, errors.New("kubernetes discovery: a namespace is required (--pool-namespace)")
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("kubernetes discovery: namespace %q: %s", c.Namespace, errs[0])
	}
	if c.LeaderElection {
		ld, rd, rp := c.LeaseDuration, c.RenewDeadline, c.RetryPeriod
		if ld < 0 || rd < 0 || rp < 0 {
			return nil, errors.New("kubernetes discovery: leader-election durations must not be negative")
		}
		if ld > 0 && rd > 0 && rd >= ld {
			return nil, fmt.Errorf("kubernetes discovery: leader-election renew deadline %s must be shorter than the lease duration %s", rd, ld)
		}
		if rd > 0 && rp > 0 && rp >= rd {
			return nil, fmt.Errorf("kubernetes discovery: leader-election retry period %s must be shorter than the renew deadline %s", rp, rd)
		}
	}
	switch {
	case c.PoolName != "" && c.EndpointSelector != "":
		return nil, errors.New("kubernetes discovery: --pool-name and --endpoint-selector are exclusive (the pool defines the selector)")
	case c.PoolName == "" && c.EndpointSelector == "":
		return nil, errors.New("kubernetes discovery: give --pool-name (InferencePool) or --endpoint-selector with --endpoint-target-ports")
	case c.PoolName != "":
		if len(c.TargetPorts) > 0 {
			return nil, errors.New("kubernetes discovery: --endpoint-target-ports is for standalone mode; the pool's spec.targetPorts are used with --pool-name")
		}
		if errs := validation.IsDNS1123Subdomain(c.PoolName); len(errs) > 0 {
			return nil, fmt.Errorf("kubernetes discovery: pool name %q: %s", c.PoolName, errs[0])
		}
		return nil, nil
	}
	sel, err := labels.Parse(c.EndpointSelector)
	if err != nil {
		return nil, fmt.Errorf("kubernetes discovery: --endpoint-selector %q: %w", c.EndpointSelector, err)
	}
	if sel.Empty() {
		return nil, fmt.Errorf("kubernetes discovery: --endpoint-selector %q selects every pod in the namespace; name the model-server pods", c.EndpointSelector)
	}
	if len(c.TargetPorts) == 0 {
		return nil, errors.New("kubernetes discovery: --endpoint-target-ports is required with --endpoint-selector")
	}
	t := &target{selector: sel}
	seen := map[int32]bool{}
	for _, p := range c.TargetPorts {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("kubernetes discovery: target port %d out of range 1-65535", p)
		}
		if seen[p] {
			return nil, fmt.Errorf("kubernetes discovery: target port %d given twice", p)
		}
		seen[p] = true
		t.ports = append(t.ports, p)
	}
	return t, nil
}

func (c *Config) leaseID() string {
	switch {
	case c.LeaderElectionID != "":
		return c.LeaderElectionID
	case c.PoolName != "":
		return "spillway-" + c.PoolName
	}
	return "spillway-endpoints"
}
