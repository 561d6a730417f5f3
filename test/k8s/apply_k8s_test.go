//go:build k8s

package k8s_test

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spillway-llm/spillway/discovery/kubernetes"
)

// retarget moves built manifests from the guides' namespace into ns.
func retarget(objs []obj, ns string) {
	for _, o := range objs {
		if o.meta()["namespace"] != nil {
			o.meta()["namespace"] = ns
		}
		if subs, ok := o.doc["subjects"].([]any); ok {
			for _, s := range subs {
				if m, ok := s.(map[string]any); ok && m["namespace"] != nil {
					m["namespace"] = ns
				}
			}
		}
	}
}

// apply creates every object on the API server (which validates them
// against its own schemas: the CRD's OpenAPI and CEL rules for the pool).
func apply(t *testing.T, objs []obj) {
	t.Helper()
	for _, o := range objs {
		u := &unstructured.Unstructured{Object: o.doc}
		require.NoError(t, k8s.Create(ctx(t), u, client.FieldOwner("spillway-test")), "applying %s from %s", o.id(), o.file)
	}
}

// TestGuidesApply applies each guide (and the guide with leader election)
// to the API server, then runs discovery with the picker's own
// ServiceAccount and RBAC against a pod made from the guide's model-server
// template: the Role is enough, and the pool selects the pods the guide runs.
func TestGuidesApply(t *testing.T) {
	for guide := range guides {
		t.Run(guide, func(t *testing.T) {
			ns := newNamespace(t)
			objs, err := build(deployDir(t, "guides", guide))
			require.NoError(t, err)
			retarget(objs, ns)
			apply(t, objs)

			// A pod as the guide's first model-server Deployment would make it.
			var tmpl *corev1.PodTemplateSpec
			for _, o := range objs {
				if o.kind() != "Deployment" || o.name() == "spillway-picker" {
					continue
				}
				var d appsv1.Deployment
				js, _ := json.Marshal(o.doc)
				require.NoError(t, json.Unmarshal(js, &d))
				tmpl = &d.Spec.Template
				break
			}
			require.NotNil(t, tmpl)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "model-0", Labels: tmpl.Labels}, Spec: tmpl.Spec}
			require.NoError(t, k8s.Create(ctx(t), pod))
			setPodStatus(t, ns, "model-0", "127.0.6.1", true)

			cfg := *restCfg
			cfg.Impersonate.UserName = "system:serviceaccount:" + ns + ":spillway-picker"
			r := startSource(t, kubernetes.Config{Namespace: ns, PoolName: "spillway-pool", RestConfig: &cfg})
			role := tmpl.Labels["llm-d.ai/role"]
			r.waitFor(t, "guide pool discovered with the picker's RBAC", "model-0=127.0.6.1:8000 "+role)
			if sa := tmpl.Spec.ServiceAccountName; sa != "" {
				// The decode sidecar follows the same pool for its allow-list.
				cfg := *restCfg
				cfg.Impersonate.UserName = "system:serviceaccount:" + ns + ":" + sa
				r := startSource(t, kubernetes.Config{Namespace: ns, PoolName: "spillway-pool", RestConfig: &cfg})
				r.waitFor(t, "guide pool discovered with the sidecar's RBAC", "model-0=127.0.6.1:8000 "+role)
			}
		})
	}
	t.Run("leader-election", func(t *testing.T) {
		dir := t.TempDir()
		rel, err := filepath.Rel(dir, deployDir(t))
		require.NoError(t, err)
		writeKustomization(t, dir, rel)
		objs, err := build(dir)
		require.NoError(t, err)
		ns := newNamespace(t)
		retarget(objs, ns)
		apply(t, objs)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d", Labels: map[string]string{"spillway.io/pool": "spillway-pool", "llm-d.ai/role": "decode"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}}}
		require.NoError(t, k8s.Create(ctx(t), pod))
		setPodStatus(t, ns, "d", "127.0.6.2", true)
		cfg := *restCfg
		cfg.Impersonate.UserName = "system:serviceaccount:" + ns + ":spillway-picker"
		r := startSource(t, kubernetes.Config{Namespace: ns, PoolName: "spillway-pool", RestConfig: &cfg, LeaderElection: true})
		r.waitFor(t, "leader elected with the component's Lease RBAC", "d=127.0.6.2:8000 decode")
	})
}

// TestMonitoringApplies applies the dashboard ConfigMap. The ServiceMonitor
// needs the Prometheus Operator CRD, which is not part of this repository:
// TestMonitoring checks it offline.
func TestMonitoringApplies(t *testing.T) {
	objs, err := build(deployDir(t, "monitoring"))
	require.NoError(t, err)
	ns := newNamespace(t)
	retarget(objs, ns)
	var cms []obj
	for _, o := range objs {
		if o.kind() == "ConfigMap" {
			cms = append(cms, o)
		}
	}
	require.Len(t, cms, 1)
	apply(t, cms)
	var got corev1.ConfigMap
	require.NoError(t, k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: "spillway-grafana-dashboard"}, &got))
	assert.Contains(t, got.Data["spillway-dashboard.json"], "spillway_requests_total")
}
