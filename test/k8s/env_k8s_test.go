//go:build k8s

package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// The real API server (kube-apiserver + etcd from test/k8s/assets.sh),
// shared by every test in the package; each test works in its own namespace.
var (
	restCfg *rest.Config
	k8s     client.Client
)

// inferencePoolCRD is the InferencePool CRD shipped in the
// gateway-api-inference-extension module the picker compiles against.
func inferencePoolCRD() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		return "", fmt.Errorf("locating sigs.k8s.io/gateway-api-inference-extension: %w", err)
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

func TestMain(m *testing.M) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		fmt.Fprintln(os.Stderr, "test/k8s: KUBEBUILDER_ASSETS is not set; run: KUBEBUILDER_ASSETS=$(bash test/k8s/assets.sh) go test -tags k8s ./test/k8s/...")
		os.Exit(1)
	}
	crd, err := inferencePoolCRD()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s:", err)
		os.Exit(1)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDInstallOptions:        envtest.CRDInstallOptions{Paths: []string{crd}, ErrorIfPathMissing: true},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	restCfg, err = env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s: starting envtest:", err)
		os.Exit(1)
	}
	k8s, err = client.New(restCfg, client.Options{Scheme: testScheme})
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s: client:", err)
	} else {
		code = m.Run()
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "test/k8s: stopping envtest:", err)
	}
	os.Exit(code)
}

var nsSeq atomic.Int64

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("t%d-%s", nsSeq.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(ns) > 63 {
		ns = strings.TrimRight(ns[:63], "-")
	}
	require.NoError(t, k8s.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	return ns
}

// ctx is a bounded context for one API call.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// eventually polls cond until it holds; the bound only stops a broken
// feature from hanging the suite, it is not a latency assertion.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func createPool(t *testing.T, ns, name string, sel map[string]string, ports ...int32) *inferencev1.InferencePool {
	t.Helper()
	p := &inferencev1.InferencePool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	setPoolSpec(p, sel, ports...)
	p.Spec.EndpointPickerRef = inferencev1.EndpointPickerRef{Name: "spillway-picker", Port: &inferencev1.Port{Number: 9002}}
	require.NoError(t, k8s.Create(ctx(t), p))
	return p
}

func setPoolSpec(p *inferencev1.InferencePool, sel map[string]string, ports ...int32) {
	p.Spec.Selector.MatchLabels = map[inferencev1.LabelKey]inferencev1.LabelValue{}
	for k, v := range sel {
		p.Spec.Selector.MatchLabels[inferencev1.LabelKey(k)] = inferencev1.LabelValue(v)
	}
	p.Spec.TargetPorts = nil
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, inferencev1.Port{Number: inferencev1.PortNumber(n)})
	}
}

func updatePool(t *testing.T, ns, name string, sel map[string]string, ports ...int32) {
	t.Helper()
	var p inferencev1.InferencePool
	require.NoError(t, k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, &p))
	setPoolSpec(&p, sel, ports...)
	require.NoError(t, k8s.Update(ctx(t), &p))
}

// createPod creates a pod and, when ip is set, gives it that IP and the
// given Ready condition, as the kubelet would (there is none in envtest).
func createPod(t *testing.T, ns, name string, lbl map[string]string, ip string, ready bool) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
	}
	require.NoError(t, k8s.Create(ctx(t), p))
	if ip != "" {
		setPodStatus(t, ns, name, ip, ready)
	}
}

func setPodStatus(t *testing.T, ns, name, ip string, ready bool) {
	t.Helper()
	var p corev1.Pod
	require.NoError(t, k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, &p))
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: metav1.Now()}}
	require.NoError(t, k8s.Status().Update(ctx(t), &p))
}

func setPodLabels(t *testing.T, ns, name string, lbl map[string]string) {
	t.Helper()
	var p corev1.Pod
	require.NoError(t, k8s.Get(ctx(t), client.ObjectKey{Namespace: ns, Name: name}, &p))
	p.Labels = lbl
	require.NoError(t, k8s.Update(ctx(t), &p))
}

func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	// Grace period 0 removes the object at once (no kubelet to confirm).
	require.NoError(t, k8s.Delete(ctx(t), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.GracePeriodSeconds(0)))
}
