package kubernetes

import (
	"maps"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/spillway-llm/spillway/discovery"
)

// target is what the endpoint set is computed from: which pods, which ports.
type target struct {
	selector labels.Selector
	ports    []int32
}

// poolTarget reads the selector and ports of an InferencePool. A pool with an
// empty selector selects nothing (rather than every pod in the namespace):
// the CRD requires a selector, and routing to arbitrary pods is never what an
// operator meant.
func poolTarget(p *inferencev1.InferencePool) target {
	var t target
	if len(p.Spec.Selector.MatchLabels) == 0 {
		t.selector = labels.Nothing()
	} else {
		m := make(map[string]string, len(p.Spec.Selector.MatchLabels))
		for k, v := range p.Spec.Selector.MatchLabels {
			m[string(k)] = string(v)
		}
		t.selector = labels.SelectorFromSet(m)
	}
	seen := map[int32]bool{}
	for _, port := range p.Spec.TargetPorts {
		n := int32(port.Number)
		if n > 0 && n <= 65535 && !seen[n] {
			seen[n] = true
			t.ports = append(t.ports, n)
		}
	}
	return t
}

// podReady reports whether a pod may receive traffic: it has an IP, is not
// terminating and its Ready condition is True.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// endpointSpecs builds one endpoint per ready, selected pod per target port,
// sorted by name. With one port the endpoint is named after the pod; with
// several (data-parallel ranks behind one pod) it is "<pod>-rank-<i>".
// Labels are the pod's labels, so llm-d.ai/role and label-selector-filter
// see what the operator put on the pod.
func endpointSpecs(t target, pods []corev1.Pod) []discovery.Spec {
	if t.selector == nil || len(t.ports) == 0 {
		return []discovery.Spec{}
	}
	specs := make([]discovery.Spec, 0, len(pods)*len(t.ports))
	for i := range pods {
		p := &pods[i]
		if !t.selector.Matches(labels.Set(p.Labels)) || !podReady(p) {
			continue
		}
		for rank, port := range t.ports {
			name := p.Name
			if len(t.ports) > 1 {
				name = p.Name + "-rank-" + strconv.Itoa(rank)
			}
			specs = append(specs, discovery.Spec{
				Name:    name,
				Address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))),
				Labels:  maps.Clone(p.Labels),
			})
		}
	}
	slices.SortFunc(specs, func(a, b discovery.Spec) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return specs
}

// sameSpecs reports whether two sorted endpoint sets are identical.
func sameSpecs(a, b []discovery.Spec) bool {
	return slices.EqualFunc(a, b, func(x, y discovery.Spec) bool {
		return x.Name == y.Name && x.Address == y.Address && maps.Equal(x.Labels, y.Labels)
	})
}
