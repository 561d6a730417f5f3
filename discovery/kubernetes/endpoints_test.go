package kubernetes

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/spillway-llm/spillway/discovery"
)

func pod(name, ip string, ready bool, lbl map[string]string) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbl},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func pool(sel map[string]string, ports ...int32) *inferencev1.InferencePool {
	p := &inferencev1.InferencePool{}
	p.Spec.Selector.MatchLabels = map[inferencev1.LabelKey]inferencev1.LabelValue{}
	for k, v := range sel {
		p.Spec.Selector.MatchLabels[inferencev1.LabelKey(k)] = inferencev1.LabelValue(v)
	}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, inferencev1.Port{Number: inferencev1.PortNumber(n)})
	}
	return p
}

func names(specs []discovery.Spec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name+"="+s.Address)
	}
	return out
}

func TestEndpointSpecsSelectsReadyPodsPerPort(t *testing.T) {
	app := map[string]string{"app": "vllm"}
	decode := map[string]string{"app": "vllm", "llm-d.ai/role": "decode"}
	terminating := pod("d", "10.0.0.4", true, app)
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	noIP := pod("e", "", true, app)
	failed := pod("f", "10.0.0.6", true, app)
	failed.Status.Phase = corev1.PodFailed
	noCond := pod("g", "10.0.0.7", true, app)
	noCond.Status.Conditions = nil
	pods := []corev1.Pod{
		pod("b", "10.0.0.2", true, decode),
		pod("a", "10.0.0.1", true, app),
		pod("c", "10.0.0.3", false, app),
		pod("x", "10.0.0.9", true, map[string]string{"app": "other"}),
		terminating, noIP, failed, noCond,
		pod("v6", "fd00::1", true, app),
	}

	one := endpointSpecs(poolTarget(pool(map[string]string{"app": "vllm"}, 8000)), pods)
	assert.Equal(t, []string{"a=10.0.0.1:8000", "b=10.0.0.2:8000", "v6=[fd00::1]:8000"}, names(one))
	assert.Equal(t, "decode", one[1].Labels["llm-d.ai/role"], "pod labels (and so the role) are carried")

	two := endpointSpecs(poolTarget(pool(map[string]string{"app": "vllm"}, 8000, 8001, 8000)), pods[:2])
	assert.Equal(t, []string{"a-rank-0=10.0.0.1:8000", "a-rank-1=10.0.0.1:8001", "b-rank-0=10.0.0.2:8000", "b-rank-1=10.0.0.2:8001"}, names(two),
		"one endpoint per port, duplicates ignored")
}

func TestEndpointSpecsEmptySelectorOrPortsSelectNothing(t *testing.T) {
	pods := []corev1.Pod{pod("a", "10.0.0.1", true, map[string]string{"app": "vllm"})}
	assert.Empty(t, endpointSpecs(poolTarget(pool(nil, 8000)), pods), "an empty selector must not select every pod")
	assert.Empty(t, endpointSpecs(poolTarget(pool(map[string]string{"app": "vllm"})), pods), "no ports, no endpoints")
	assert.Empty(t, endpointSpecs(poolTarget(pool(map[string]string{"app": "vllm"}, 0, 70000)), pods), "invalid ports are ignored")
}

func TestSameSpecs(t *testing.T) {
	a := []discovery.Spec{{Name: "a", Address: "1:1", Labels: map[string]string{"r": "x"}}}
	b := []discovery.Spec{{Name: "a", Address: "1:1", Labels: map[string]string{"r": "x"}}}
	assert.True(t, sameSpecs(a, b))
	b[0].Labels["r"] = "y"
	assert.False(t, sameSpecs(a, b), "a label change is a change")
	assert.False(t, sameSpecs(a, nil))
}

func TestTrimPodKeepsWhatEndpointsNeed(t *testing.T) {
	p := pod("a", "10.0.0.1", true, map[string]string{"app": "vllm"})
	p.Spec.Containers = []corev1.Container{{Name: "vllm", Image: "big"}}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue})
	out, err := trimPod(&p)
	require.NoError(t, err)
	tp := out.(*corev1.Pod)
	assert.Empty(t, tp.Spec.Containers)
	assert.Len(t, tp.Status.Conditions, 1)
	assert.True(t, podReady(tp))
	assert.Equal(t, names(endpointSpecs(poolTarget(pool(map[string]string{"app": "vllm"}, 8000)), []corev1.Pod{p})),
		names(endpointSpecs(poolTarget(pool(map[string]string{"app": "vllm"}, 8000)), []corev1.Pod{*tp})))
	// Tombstones and other objects pass through untouched.
	other := "tombstone"
	got, err := trimPod(other)
	require.NoError(t, err)
	assert.Equal(t, other, got)
}

// BenchmarkEndpointSpecs is the cost of one full recompute (every pod or
// pool event triggers one, coalesced): 1000 pods, half of them selected.
func BenchmarkEndpointSpecs(b *testing.B) {
	pods := make([]corev1.Pod, 1000)
	for i := range pods {
		app := "vllm"
		if i%2 == 1 {
			app = "other"
		}
		pods[i] = pod(fmt.Sprintf("pod-%04d", i), fmt.Sprintf("10.0.%d.%d", i/250, i%250), true,
			map[string]string{"app": app, "llm-d.ai/role": "decode", "pod-template-hash": "abc"})
	}
	t := poolTarget(pool(map[string]string{"app": "vllm"}, 8000))
	b.ReportAllocs()
	for b.Loop() {
		if len(endpointSpecs(t, pods)) != 500 {
			b.Fatal("wrong count")
		}
	}
}
