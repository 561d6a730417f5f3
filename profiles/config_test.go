package profiles_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillway-llm/spillway/profiles"
)

// fakeParamFilter stands in for a plugin with llm-d style parameters
// (protocols.md §6 uses prefix-cache-affinity-filter, which lives in another
// package): it passes everything and shows its resolved parameters.
type fakeParamFilter struct {
	profiles.Named
	P fakeParams
}

type fakeParams struct {
	PeakPrefillThroughput float64 `json:"peakPrefillThroughput"`
	AffinityThreshold     float64 `json:"affinityThreshold"`
	MaxTTFTPenaltyMs      int     `json:"maxTTFTPenaltyMs"`
	TTFTSource            string  `json:"ttftSource"`
}

func (f *fakeParamFilter) Params() any { return f.P }
func (f *fakeParamFilter) Filter(_ context.Context, _ *profiles.CycleState, _ *profiles.Request, eps []*profiles.Endpoint) []*profiles.Endpoint {
	return eps
}

func init() {
	profiles.Register("fake-param-filter", func(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
		p := fakeParams{PeakPrefillThroughput: 15928, AffinityThreshold: 0.8, MaxTTFTPenaltyMs: 18000, TTFTSource: "prefillThroughput"}
		if err := profiles.DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		return &fakeParamFilter{Named: profiles.NewNamed("fake-param-filter", name), P: p}, nil
	})
}

func load(t *testing.T, doc string) (*profiles.Scheduler, error) {
	t.Helper()
	s, err := profiles.LoadConfigBytes("test.yaml", []byte(doc), profiles.Options{})
	if s != nil {
		t.Cleanup(s.Close)
	}
	return s, err
}

func mustLoad(t *testing.T, doc string) *profiles.Scheduler {
	t.Helper()
	s, err := load(t, doc)
	if err != nil {
		t.Fatalf("config rejected: %v", err)
	}
	return s
}

func wantErr(t *testing.T, doc string, wants ...string) {
	t.Helper()
	_, err := load(t, doc)
	if err == nil {
		t.Fatalf("config accepted, want error containing %q", wants)
	}
	for _, w := range append(wants, "test.yaml") {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// section6 is protocols.md §6's shape with the affinity filter replaced by a
// registered stand-in.
const section6 = `kind: EndpointPickerConfig
plugins:
- type: fake-param-filter   # name defaults to type
  name: affinity
  parameters: {peakPrefillThroughput: 15751, affinityThreshold: 0.6, maxTTFTPenaltyMs: 36000}
- type: prefill-filter
- type: queue-scorer
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: affinity}, {pluginRef: queue-scorer, weight: 1}, {pluginRef: max-score-picker}]
- name: decode
  plugins: [{pluginRef: queue-scorer}]
`

func TestConfigAPIVersions(t *testing.T) {
	for _, v := range []string{"llm-d.ai/v1alpha1", "llm-d.ai/v1", "inference.networking.x-k8s.io/v1alpha1"} {
		t.Run(v, func(t *testing.T) {
			doc := "apiVersion: " + v + "\n" + strings.Replace(section6, "- type: queue-scorer\n", "- type: queue-scorer\n- type: max-score-picker\n- type: fake-handler\n", 1)
			s := mustLoad(t, doc)
			d := s.Describe()
			for _, want := range []string{
				"apiVersion " + v,
				`profile "prefill":`,
				`filter  prefill-filter`,
				`filter  affinity/fake-param-filter {"peakPrefillThroughput":15751,"affinityThreshold":0.6,"maxTTFTPenaltyMs":36000,"ttftSource":"prefillThroughput"}`,
				"scorer  queue-scorer weight=1",
				`picker  max-score-picker {"maxNumOfEndpoints":1}`,
				`profile "decode":`,
				"profile handler: fake-handler",
			} {
				if !strings.Contains(d, want) {
					t.Errorf("Describe lacks %q:\n%s", want, d)
				}
			}
		})
	}
	wantErr(t, "apiVersion: llm-d.ai/v2\n"+section6, `unsupported apiVersion "llm-d.ai/v2"`, "llm-d.ai/v1alpha1")
	wantErr(t, section6, "apiVersion is required")
	wantErr(t, "apiVersion: llm-d.ai/v1\nkind: Deployment\nschedulingProfiles: [{name: a, plugins: []}]\n", `unsupported kind "Deployment"`)
}

// fakeHandler is a profile handler so that multi-profile files build.
type fakeHandler struct{ profiles.Named }

func (fakeHandler) Handle(ctx context.Context, req *profiles.Request, run profiles.ProfileRunner) (*profiles.Result, error) {
	res := &profiles.Result{Primary: run.Profiles()[0], Profiles: map[string]*profiles.ProfileResult{}}
	for _, p := range run.Profiles() {
		pr, err := run.Run(ctx, p, req)
		if err != nil {
			return nil, err
		}
		res.Profiles[p] = pr
	}
	return res, nil
}

func init() {
	profiles.Register("fake-handler", func(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
		return &fakeHandler{profiles.NewNamed("fake-handler", name)}, nil
	})
}

const head = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"

func TestConfigDefaultsAdded(t *testing.T) {
	s := mustLoad(t, head+`plugins:
- type: decode-filter
schedulingProfiles:
- name: only
  plugins: [{pluginRef: decode-filter}]
`)
	d := s.Describe()
	for _, want := range []string{
		"profile handler: single-profile-handler",
		"added with defaults (not in the file): ",
		"single-profile-handler",
		`picker  max-score-picker {"maxNumOfEndpoints":1}`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe lacks %q:\n%s", want, d)
		}
	}
	if _, ok := s.Plugin("single-profile-handler"); !ok {
		t.Error("implied handler not reachable by name")
	}
}

func TestConfigErrors(t *testing.T) {
	prof := "schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: x}]\n"
	t.Run("misspelled parameter", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: max-score-picker\n  name: x\n  parameters: {maxNumOfEndpoint: 2}\n"+prof,
			`plugin "x" (type max-score-picker)`, `unknown parameter "maxNumOfEndpoint"`, "accepted parameters: maxNumOfEndpoints (integer)")
	})
	t.Run("misspelled parameter lists all accepted", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: fake-param-filter\n  name: x\n  parameters: {affinityTreshold: 0.5}\n"+prof,
			`unknown parameter "affinityTreshold"`, "peakPrefillThroughput (number), affinityThreshold (number), maxTTFTPenaltyMs (integer), ttftSource (string)")
	})
	t.Run("wrong type", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: max-score-picker\n  name: x\n  parameters: {maxNumOfEndpoints: two}\n"+prof,
			`plugin "x"`, `parameter "maxNumOfEndpoints"`, "got JSON string, want integer")
	})
	t.Run("invalid value", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: round-robin-picker\n  name: x\n  parameters: {maxNumOfEndpoints: 0}\n"+prof,
			`plugin "x"`, "maxNumOfEndpoints must be ≥ 1")
	})
	t.Run("parameters on a plugin without any", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: queue-scorer\n  name: x\n  parameters: {foo: 1}\n"+prof,
			`unknown parameter "foo"`, "accepted parameters: none")
	})
	t.Run("unknown type", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: max-scor-picker\n  name: x\n"+prof,
			`plugin "x": unknown plugin type "max-scor-picker"`, "known types:", "max-score-picker")
	})
	t.Run("missing type", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- name: x\n"+prof, "plugins[0]: type is required")
	})
	t.Run("duplicate name", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: queue-scorer\n- type: queue-scorer\n"+prof, `duplicate plugin name "queue-scorer"`)
	})
	t.Run("bad pluginRef", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: queue-scorer\n"+"schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: queue-scorer}, {pluginRef: nope}]\n",
			`profile "p": pluginRef "nope" names no plugin`)
	})
	t.Run("weight on a filter", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: decode-filter\n"+"schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: decode-filter, weight: 2}]\n",
			`"decode-filter" is a filter; weight applies to scorers only`)
	})
	t.Run("weight on a picker", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: random-picker\n"+"schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: random-picker, weight: 2}]\n",
			`"random-picker" is a picker; weight applies to scorers only`)
	})
	t.Run("negative weight", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: queue-scorer\n"+"schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: queue-scorer, weight: -1}]\n",
			"weight must be ≥ 0")
	})
	t.Run("two pickers", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: random-picker\n- type: max-score-picker\n"+"schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: random-picker}, {pluginRef: max-score-picker}]\n",
			"two pickers")
	})
	t.Run("handler in a profile", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: single-profile-handler\n"+"schedulingProfiles:\n- name: p\n  plugins: [{pluginRef: single-profile-handler}]\n",
			"is not a filter, scorer or picker")
	})
	t.Run("multiple profiles without handler", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: queue-scorer\n"+"schedulingProfiles:\n- name: a\n  plugins: [{pluginRef: queue-scorer}]\n- name: b\n  plugins: [{pluginRef: queue-scorer}]\n",
			"2 scheduling profiles need a profile handler")
	})
	t.Run("duplicate profile", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: fake-handler\n"+"schedulingProfiles:\n- name: a\n  plugins: []\n- name: a\n  plugins: []\n",
			`duplicate profile "a"`)
	})
	t.Run("no profiles", func(t *testing.T) {
		wantErr(t, head+"plugins: []\n", "at least one profile is required")
	})
	t.Run("unknown top-level field", func(t *testing.T) {
		wantErr(t, head+"plugin: []\n"+prof, `unknown field "plugin"`, "accepted fields: apiVersion, kind, plugins, schedulingProfiles")
	})
	t.Run("unknown plugin field", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: queue-scorer\n  params: {}\n"+prof, `unknown field "params"`, "plugins take type, name, parameters")
	})
	t.Run("not yaml", func(t *testing.T) {
		wantErr(t, head+"plugins: [\n", "not valid YAML")
	})
	t.Run("label selector needs a selector", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: label-selector-filter\n  name: x\n"+prof, `plugin "x"`, "matchLabels or matchExpressions is required")
	})
	t.Run("label selector bad operator", func(t *testing.T) {
		wantErr(t, head+"plugins:\n- type: label-selector-filter\n  name: x\n  parameters: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}\n"+prof,
			`operator "Equals"`, "accepted: In, NotIn, Exists, DoesNotExist")
	})
}

func TestLoadConfigFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "epp.yaml")
	doc := head + "plugins:\n- type: round-robin-picker\nschedulingProfiles:\n- name: p\n  plugins: [{pluginRef: round-robin-picker}]\n"
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := profiles.LoadConfigFile(p, profiles.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.ConfigDir() != dir || s.Config().File() != p {
		t.Errorf("config dir %q file %q", s.ConfigDir(), s.Config().File())
	}
	if !strings.Contains(s.Describe(), "picker  round-robin-picker") {
		t.Errorf("Describe:\n%s", s.Describe())
	}
	if _, err := profiles.LoadConfigFile(filepath.Join(dir, "missing.yaml"), profiles.Options{}); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(head+"plugins:\n- type: nope\nschedulingProfiles: [{name: p, plugins: []}]\n"), 0o644)
	if _, err := profiles.LoadConfigFile(bad, profiles.Options{}); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("error must name the file: %v", err)
	}
}
