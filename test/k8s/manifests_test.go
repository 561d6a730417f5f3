package k8s_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	inferencev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// guides are the deployable kustomizations and the roles their pool must hold.
var guides = map[string][]string{
	"optimized-baseline":   {""},
	"pd-disaggregation":    {"decode", "prefill"},
	"e-p-d-disaggregation": {"decode", "prefill", "encode"},
}

func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "go.mod"))
	require.NoError(t, err, "test/k8s must run from the repository")
	return dir
}

func deployDir(t testing.TB, p ...string) string {
	return filepath.Join(append([]string{repoRoot(t), "deploy"}, p...)...)
}

var testScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := inferencev1.Install(s); err != nil {
		panic(err)
	}
	return s
}()

// decodeStrict decodes a manifest into its typed object with the API
// machinery's strict decoder: unknown or duplicated fields are errors.
func decodeStrict(t testing.TB, o obj) client.Object {
	t.Helper()
	js, err := json.Marshal(o.doc)
	require.NoError(t, err)
	ser := kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, testScheme, testScheme, kjson.SerializerOptions{Strict: true})
	ro, _, err := ser.Decode(js, nil, nil)
	require.NoError(t, err, "%s (%s)", o.id(), o.file)
	co, ok := ro.(client.Object)
	require.True(t, ok, "%s is not an object", o.id())
	return co
}

func buildGuide(t testing.TB, name string) []client.Object {
	t.Helper()
	objs, err := build(deployDir(t, "guides", name))
	require.NoError(t, err)
	var out []client.Object
	seen := map[string]bool{}
	for _, o := range objs {
		require.False(t, seen[o.id()], "%s: %s defined twice", name, o.id())
		seen[o.id()] = true
		out = append(out, decodeStrict(t, o))
	}
	return out
}

func find[T client.Object](objs []client.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func container(t testing.TB, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == name {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("%s has no container %q", d.Name, name)
	return nil
}

func flagValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// TestGuideManifests decodes every guide strictly and checks that its parts
// fit together: the pool selects the model-server pods on a port they
// serve, the picker reads the guide's ConfigMap and names the pool, decode
// pods run the sidecar in front of vLLM, prefill and encode pods publish KV
// events, images follow the kustomize images: entries, and RBAC is
// read-only on pods and inferencepools.
func TestGuideManifests(t *testing.T) {
	for guide, roles := range guides {
		t.Run(guide, func(t *testing.T) {
			objs := buildGuide(t, guide)
			for _, o := range objs {
				assert.Equal(t, "spillway", o.GetNamespace(), "%T %s gets the guide namespace", o, o.GetName())
			}
			pools := find[*inferencev1.InferencePool](objs)
			require.Len(t, pools, 1)
			pool := pools[0]
			require.Len(t, pool.Spec.TargetPorts, 1)
			port := int32(pool.Spec.TargetPorts[0].Number)
			sel := map[string]string{}
			for k, v := range pool.Spec.Selector.MatchLabels {
				sel[string(k)] = string(v)
			}
			require.NotEmpty(t, sel)

			// Picker: ConfigMap, pool flags, Service behind endpointPickerRef.
			var picker *appsv1.Deployment
			var servers []*appsv1.Deployment
			for _, d := range find[*appsv1.Deployment](objs) {
				require.True(t, labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)), "%s selector matches its template", d.Name)
				if d.Name == "spillway-picker" {
					picker = d
				} else {
					servers = append(servers, d)
				}
			}
			require.NotNil(t, picker)
			pc := container(t, picker, "picker")
			assert.Equal(t, "spillway:latest", pc.Image, "image comes from the images: entry for spillway")
			assert.Equal(t, "serve", pc.Args[0])
			v, _ := flagValue(pc.Args, "--pool-name")
			assert.Equal(t, pool.Name, v)
			cmName := picker.Spec.Template.Spec.Volumes[0].ConfigMap.Name
			cms := find[*corev1.ConfigMap](objs)
			require.True(t, slices.ContainsFunc(cms, func(c *corev1.ConfigMap) bool { return c.Name == cmName && c.Data["config.yaml"] != "" }),
				"the guide provides ConfigMap %s with config.yaml", cmName)
			require.Equal(t, string(pool.Spec.EndpointPickerRef.Name), "spillway-picker")
			svcs := find[*corev1.Service](objs)
			require.Len(t, svcs, 1)
			assert.Equal(t, string(pool.Spec.EndpointPickerRef.Name), svcs[0].Name)
			assert.True(t, slices.ContainsFunc(svcs[0].Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Port == int32(pool.Spec.EndpointPickerRef.Port.Number)
			}), "the Service exposes the endpointPickerRef port")
			assert.True(t, labels.SelectorFromSet(svcs[0].Spec.Selector).Matches(labels.Set(picker.Spec.Template.Labels)))

			// Model servers: one Deployment per role, selected by the pool.
			var gotRoles []string
			for _, d := range servers {
				l := d.Spec.Template.Labels
				require.True(t, labels.SelectorFromSet(sel).Matches(labels.Set(l)), "pool selects %s pods", d.Name)
				role := l["llm-d.ai/role"]
				gotRoles = append(gotRoles, role)
				vllm := container(t, d, "vllm")
				assert.Equal(t, "vllm/vllm-openai:v0.11.0", vllm.Image)
				ev, ok := flagValue(vllm.Args, "--kv-events-config")
				require.True(t, ok, "%s publishes KV events", d.Name)
				var kv map[string]any
				require.NoError(t, json.Unmarshal([]byte(ev), &kv), "%s --kv-events-config is JSON", d.Name)
				assert.Equal(t, true, kv["enable_kv_cache_events"])
				assert.Equal(t, "zmq", kv["publisher"])
				servePort := vllm.Ports[0].ContainerPort
				if role == "decode" {
					sc := container(t, d, "sidecar")
					assert.Equal(t, []string{"sidecar", "--port", "8000", "--decoder", "http://127.0.0.1:8200"}, sc.Args[:5])
					v, _ := flagValue(sc.Args, "--pool-name")
					assert.Equal(t, pool.Name, v, "the sidecar's allow-list follows the pool")
					assert.Equal(t, "spillway-sidecar", d.Spec.Template.Spec.ServiceAccountName)
					assert.Equal(t, "spillway:latest", sc.Image)
					assert.Equal(t, int32(8200), servePort, "vLLM listens behind the sidecar")
					servePort = sc.Ports[0].ContainerPort
				}
				assert.Equal(t, port, servePort, "%s serves the pool's target port", d.Name)
				if role == "prefill" || role == "decode" {
					kt, ok := flagValue(vllm.Args, "--kv-transfer-config")
					require.True(t, ok, "%s transfers KV", d.Name)
					assert.Contains(t, kt, "NixlConnector")
				}
			}
			slices.Sort(gotRoles)
			want := slices.Clone(roles)
			slices.Sort(want)
			assert.Equal(t, want, gotRoles)

			// RBAC: read-only, namespaced, bound to the picker's account.
			for _, r := range find[*rbacv1.Role](objs) {
				for _, rule := range r.Rules {
					assert.ElementsMatch(t, []string{"get", "list", "watch"}, rule.Verbs, "role %s is read-only", r.Name)
					for _, res := range rule.Resources {
						assert.Contains(t, []string{"pods", "inferencepools"}, res)
					}
				}
			}
			assert.Empty(t, find[*rbacv1.ClusterRole](objs))
			assert.Empty(t, find[*rbacv1.ClusterRoleBinding](objs))
			accounts := map[string]bool{}
			for _, sa := range find[*corev1.ServiceAccount](objs) {
				accounts[sa.Name] = true
			}
			bound := map[string]bool{}
			for _, rb := range find[*rbacv1.RoleBinding](objs) {
				require.Len(t, rb.Subjects, 1)
				assert.Equal(t, "Role", rb.RoleRef.Kind)
				assert.True(t, accounts[rb.Subjects[0].Name], "%s binds an account the guide creates", rb.Name)
				assert.Equal(t, "spillway", rb.Subjects[0].Namespace)
				bound[rb.Subjects[0].Name] = true
			}
			for _, d := range find[*appsv1.Deployment](objs) {
				if sa := d.Spec.Template.Spec.ServiceAccountName; sa != "" {
					assert.True(t, bound[sa], "%s runs as %s, which is bound to the Role", d.Name, sa)
				}
			}
			assert.True(t, bound[picker.Spec.Template.Spec.ServiceAccountName])
		})
	}
}

// TestLeaderElectionComponent builds a guide with the leader-election
// component added, as docs/kubernetes.md tells operators to.
func TestLeaderElectionComponent(t *testing.T) {
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, deployDir(t))
	require.NoError(t, err)
	writeKustomization(t, dir, rel)
	objs, err := build(dir)
	require.NoError(t, err)
	var typed []client.Object
	for _, o := range objs {
		co := decodeStrict(t, o)
		assert.Equal(t, "spillway", co.GetNamespace(), "%s", o.id())
		typed = append(typed, co)
	}
	var picker *appsv1.Deployment
	for _, d := range find[*appsv1.Deployment](typed) {
		if d.Name == "spillway-picker" {
			picker = d
		}
	}
	require.NotNil(t, picker)
	assert.Equal(t, int32(3), *picker.Spec.Replicas)
	assert.Contains(t, container(t, picker, "picker").Args, "--leader-elect")
	var leaseRule bool
	for _, r := range find[*rbacv1.Role](typed) {
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "leases") {
				leaseRule = true
				assert.ElementsMatch(t, []string{"get", "create", "update"}, rule.Verbs)
			}
		}
	}
	assert.True(t, leaseRule, "the component grants the Lease")
	assert.Len(t, find[*rbacv1.RoleBinding](typed), 3, "picker, sidecar and the Lease binding")
}

// writeKustomization writes the overlay docs/kubernetes.md shows for HA: a
// guide plus the leader-election component. The overlay sets the namespace
// again because kustomize only applies a kustomization's namespace to its
// own resources, not to components added above it.
func writeKustomization(t testing.TB, dir, deployRel string) {
	t.Helper()
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: spillway\nresources:\n- " + filepath.Join(deployRel, "guides/pd-disaggregation") +
		"\ncomponents:\n- " + filepath.Join(deployRel, "components/leader-election") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// spillwayBin builds cmd/spillway once, so configs are checked by the real
// `spillway validate` with every plugin the binary registers.
func spillwayBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spillway-k8s-test")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "spillway")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/spillway")
		cmd.Dir = repoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = err
			binPath = string(out)
		}
	})
	require.NoError(t, binErr, binPath)
	return binPath
}

// TestGuideConfigsValidate runs `spillway validate` on each guide's
// EndpointPickerConfig as it will be mounted.
func TestGuideConfigsValidate(t *testing.T) {
	bin := spillwayBin(t)
	for guide := range guides {
		t.Run(guide, func(t *testing.T) {
			var cfg string
			for _, cm := range find[*corev1.ConfigMap](buildGuide(t, guide)) {
				if cm.Name == "spillway-picker-config" {
					cfg = cm.Data["config.yaml"]
				}
			}
			require.NotEmpty(t, cfg)
			path := filepath.Join(t.TempDir(), "config.yaml")
			require.NoError(t, os.WriteFile(path, []byte(cfg), 0o644))
			out, err := exec.Command(bin, "validate", "--config", path).CombinedOutput()
			require.NoError(t, err, "spillway validate %s:\n%s", guide, out)
			assert.Contains(t, string(out), "ok")
			if guide != "optimized-baseline" {
				assert.Contains(t, string(out), "disagg-profile-handler")
			}
		})
	}
}

// TestManifestFlagsExist runs `spillway <command> --help` for every
// container of the spillway image and checks that each flag its args pass
// is one the binary accepts, so a manifest cannot drift from the CLI.
func TestManifestFlagsExist(t *testing.T) {
	bin := spillwayBin(t)
	help := map[string]string{}
	missing := map[string]bool{}
	flagRe := regexp.MustCompile(`^--[a-z0-9-]+`)
	for guide := range guides {
		for _, d := range find[*appsv1.Deployment](buildGuide(t, guide)) {
			for _, c := range d.Spec.Template.Spec.Containers {
				if !strings.HasPrefix(c.Image, "spillway:") {
					continue
				}
				sub := c.Args[0]
				if _, ok := help[sub]; !ok {
					out, err := exec.Command(bin, sub, "--help").CombinedOutput()
					require.NoError(t, err, "spillway %s --help: %s", sub, out)
					help[sub] = string(out)
				}
				for _, a := range c.Args[1:] {
					if f := flagRe.FindString(a); f != "" && !missing[sub+" "+f] && !strings.Contains(help[sub], f+" ") {
						missing[sub+" "+f] = true
						t.Errorf("%s/%s passes %s, which `spillway %s --help` does not list", guide, d.Name, f, sub)
					}
				}
			}
		}
	}
	assert.Contains(t, help, "serve")
	assert.Contains(t, help, "sidecar")
}

// spillwayMetrics are the metric families the dashboard may use.
var spillwayMetrics = []string{
	"spillway_requests_total", "spillway_scheduler_e2e_duration_seconds_bucket", "spillway_plugin_duration_seconds_bucket",
	"spillway_decisions_total", "spillway_endpoint_metrics_stale", "spillway_affinity_decisions_total",
	"spillway_inflight_tokens", "spillway_disagg_decisions_total", "spillway_k8s_endpoints", "spillway_k8s_leader",
}

// TestMonitoring checks the ServiceMonitor scrapes the picker Service's
// metrics port (decoded as unstructured: its CRD is not part of this repo)
// and that every dashboard query is PromQL over spillway's own metrics.
func TestMonitoring(t *testing.T) {
	objs, err := build(deployDir(t, "monitoring"))
	require.NoError(t, err)
	picker, err := build(deployDir(t, "base", "picker"))
	require.NoError(t, err)
	var svc *corev1.Service
	for _, o := range picker {
		if s, ok := decodeStrict(t, o).(*corev1.Service); ok {
			svc = s
		}
	}
	require.NotNil(t, svc)

	var sm, dash *obj
	for i := range objs {
		switch objs[i].kind() {
		case "ServiceMonitor":
			sm = &objs[i]
		case "ConfigMap":
			dash = &objs[i]
		}
	}
	require.NotNil(t, sm)
	assert.Equal(t, "monitoring.coreos.com/v1", sm.apiVersion())
	spec := sm.doc["spec"].(map[string]any)
	ml := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	set := labels.Set{}
	for k, v := range ml {
		set[k] = v.(string)
	}
	assert.True(t, labels.SelectorFromSet(set).Matches(labels.Set(svc.Labels)), "ServiceMonitor selects the picker Service")
	eps := spec["endpoints"].([]any)
	require.Len(t, eps, 1)
	portName := eps[0].(map[string]any)["port"].(string)
	assert.True(t, slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == portName }))

	require.NotNil(t, dash)
	cm := decodeStrict(t, *dash).(*corev1.ConfigMap)
	assert.Equal(t, "1", cm.Labels["grafana_dashboard"])
	var board struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal([]byte(cm.Data["spillway-dashboard.json"]), &board))
	require.NotEmpty(t, board.Panels)
	metricRe := regexp.MustCompile(`spillway_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, p := range board.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			ms := metricRe.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, ms, "%s: %s", p.Title, tg.Expr)
			for _, m := range ms {
				assert.Contains(t, spillwayMetrics, m, "%s uses an unknown metric", p.Title)
				used[m] = true
			}
			assert.Equal(t, strings.Count(tg.Expr, "("), strings.Count(tg.Expr, ")"), "%s: unbalanced parentheses", p.Title)
		}
	}
	assert.Len(t, used, len(spillwayMetrics), "every listed metric has a panel")
}
