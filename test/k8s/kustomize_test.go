package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"sigs.k8s.io/yaml"
)

// obj is one manifest as generic JSON, with the file it came from.
type obj struct {
	doc  map[string]any
	file string
}

func (o obj) kind() string       { s, _ := o.doc["kind"].(string); return s }
func (o obj) apiVersion() string { s, _ := o.doc["apiVersion"].(string); return s }
func (o obj) meta() map[string]any {
	m, _ := o.doc["metadata"].(map[string]any)
	if m == nil {
		m = map[string]any{}
		o.doc["metadata"] = m
	}
	return m
}
func (o obj) name() string { s, _ := o.meta()["name"].(string); return s }
func (o obj) id() string   { return o.kind() + "/" + o.name() }

// kustomization is the subset of kustomize's format deploy/ uses. It is
// decoded strictly, so a field this resolver does not implement (and so
// would silently ignore) fails the test instead.
type kustomization struct {
	APIVersion         string        `json:"apiVersion"`
	Kind               string        `json:"kind"`
	Namespace          string        `json:"namespace,omitempty"`
	Resources          []string      `json:"resources,omitempty"`
	Components         []string      `json:"components,omitempty"`
	Images             []image       `json:"images,omitempty"`
	Replicas           []replica     `json:"replicas,omitempty"`
	Patches            []patch       `json:"patches,omitempty"`
	ConfigMapGenerator []cmGenerator `json:"configMapGenerator,omitempty"`
}

type image struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
}

type replica struct {
	Name  string `json:"name"`
	Count int64  `json:"count"`
}

type patch struct {
	Path   string `json:"path"`
	Target struct {
		Group   string `json:"group,omitempty"`
		Version string `json:"version,omitempty"`
		Kind    string `json:"kind"`
		Name    string `json:"name"`
	} `json:"target"`
}

type cmGenerator struct {
	Name    string   `json:"name"`
	Files   []string `json:"files"`
	Options struct {
		DisableNameSuffixHash bool              `json:"disableNameSuffixHash"`
		Labels                map[string]string `json:"labels,omitempty"`
	} `json:"options"`
}

func strictYAML(data []byte, into any) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// splitDocs splits a multi-document YAML file.
func splitDocs(data []byte) [][]byte {
	var out [][]byte
	for _, d := range bytes.Split(data, []byte("\n---")) {
		d = bytes.TrimPrefix(d, []byte("\n"))
		if len(bytes.TrimSpace(stripComments(d))) > 0 {
			out = append(out, d)
		}
	}
	return out
}

func stripComments(d []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(d, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func readManifests(path string) ([]obj, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []obj
	for _, d := range splitDocs(data) {
		js, err := yaml.YAMLToJSON(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var m map[string]any
		if err := json.Unmarshal(js, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, obj{doc: m, file: path})
	}
	return out, nil
}

// build resolves a kustomization directory the way `kustomize build` does
// for the features above: resources (files and directories), components,
// configMapGenerator, then this level's namespace, images, replicas and
// JSON6902 patches.
func build(dir string) ([]obj, error) {
	return buildKind(dir, "Kustomization", nil)
}

func buildKind(dir, wantKind string, parent []obj) ([]obj, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k kustomization
	if err := strictYAML(data, &k); err != nil {
		return nil, fmt.Errorf("%s/kustomization.yaml: %w", dir, err)
	}
	if k.Kind != wantKind {
		return nil, fmt.Errorf("%s: kind %q, want %q", dir, k.Kind, wantKind)
	}
	objs := parent
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: resource %s: %w", dir, r, err)
		}
		var got []obj
		if st.IsDir() {
			got, err = build(p)
		} else {
			got, err = readManifests(p)
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, got...)
	}
	for _, c := range k.Components {
		if objs, err = buildKind(filepath.Join(dir, c), "Component", objs); err != nil {
			return nil, err
		}
	}
	for _, g := range k.ConfigMapGenerator {
		if !g.Options.DisableNameSuffixHash {
			return nil, fmt.Errorf("%s: configMapGenerator %s: name suffix hashes are not resolved here; set disableNameSuffixHash", dir, g.Name)
		}
		cmData := map[string]any{}
		for _, f := range g.Files {
			key, path, ok := strings.Cut(f, "=")
			if !ok {
				key, path = filepath.Base(f), f
			}
			b, err := os.ReadFile(filepath.Join(dir, path))
			if err != nil {
				return nil, fmt.Errorf("%s: configMapGenerator %s: %w", dir, g.Name, err)
			}
			cmData[key] = string(b)
		}
		labels := map[string]any{}
		for k, v := range g.Options.Labels {
			labels[k] = v
		}
		objs = append(objs, obj{file: filepath.Join(dir, "kustomization.yaml"), doc: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": g.Name, "labels": labels},
			"data":     cmData,
		}})
	}
	if k.Namespace != "" {
		for _, o := range objs {
			setNamespace(o, k.Namespace)
		}
	}
	for _, im := range k.Images {
		for _, o := range objs {
			forEachContainer(o, func(c map[string]any) { c["image"] = retag(c["image"].(string), im) })
		}
	}
	for _, r := range k.Replicas {
		n := 0
		for _, o := range objs {
			if o.name() == r.Name && (o.kind() == "Deployment" || o.kind() == "StatefulSet") {
				o.doc["spec"].(map[string]any)["replicas"] = r.Count
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: replicas: no workload named %s", dir, r.Name)
		}
	}
	for _, p := range k.Patches {
		ops, err := os.ReadFile(filepath.Join(dir, p.Path))
		if err != nil {
			return nil, err
		}
		opsJSON, err := yaml.YAMLToJSON(ops)
		if err != nil {
			return nil, fmt.Errorf("%s: patch %s: %w", dir, p.Path, err)
		}
		jp, err := jsonpatch.DecodePatch(opsJSON)
		if err != nil {
			return nil, fmt.Errorf("%s: patch %s is not a JSON6902 patch: %w", dir, p.Path, err)
		}
		n := 0
		for i, o := range objs {
			gv := o.apiVersion()
			if o.kind() != p.Target.Kind || o.name() != p.Target.Name || (p.Target.Group != "" && !strings.HasPrefix(gv, p.Target.Group+"/")) {
				continue
			}
			cur, _ := json.Marshal(o.doc)
			next, err := jp.Apply(cur)
			if err != nil {
				return nil, fmt.Errorf("%s: patch %s on %s: %w", dir, p.Path, o.id(), err)
			}
			var m map[string]any
			if err := json.Unmarshal(next, &m); err != nil {
				return nil, err
			}
			objs[i].doc = m
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("%s: patch %s matches nothing", dir, p.Path)
		}
	}
	return objs, nil
}

var clusterScoped = []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}

func setNamespace(o obj, ns string) {
	if slices.Contains(clusterScoped, o.kind()) {
		return
	}
	o.meta()["namespace"] = ns
	if o.kind() == "RoleBinding" || o.kind() == "ClusterRoleBinding" {
		subs, _ := o.doc["subjects"].([]any)
		for _, s := range subs {
			if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
				if cur, _ := m["namespace"].(string); cur == "" || cur == "default" {
					m["namespace"] = ns
				}
			}
		}
	}
}

func podSpec(o obj) map[string]any {
	spec, _ := o.doc["spec"].(map[string]any)
	if o.kind() == "Pod" {
		return spec
	}
	tmpl, _ := spec["template"].(map[string]any)
	ps, _ := tmpl["spec"].(map[string]any)
	return ps
}

func forEachContainer(o obj, f func(map[string]any)) {
	ps := podSpec(o)
	for _, key := range []string{"initContainers", "containers"} {
		cs, _ := ps[key].([]any)
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				f(m)
			}
		}
	}
}

// retag applies a kustomize images: entry to one image reference.
func retag(ref string, im image) string {
	name, tag := ref, ""
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	if name != im.Name {
		return ref
	}
	if im.NewName != "" {
		name = im.NewName
	}
	if im.NewTag != "" {
		tag = im.NewTag
	}
	if tag == "" {
		return name
	}
	return name + ":" + tag
}
