package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runValidate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newValidateCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidatePrintsResolvedProfiles(t *testing.T) {
	cfg := write(t, "config.yaml", `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: queue-scorer
  name: queue
schedulingProfiles:
- name: default
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue, weight: 2}]
`)
	eps := write(t, "endpoints.yaml", "endpoints:\n- {name: decode-0, address: '127.0.0.1:8200', labels: {llm-d.ai/role: decode}}\n")
	out, err := runValidate(t, "--config", cfg, "--endpoints", eps)
	if err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	for _, want := range []string{
		"profile handler: single-profile-handler",
		`profile "default":`,
		"filter  decode-filter",
		"scorer  queue/queue-scorer weight=2",
		`picker  max-score-picker {"maxNumOfEndpoints":1}`,
		"decode-0", "127.0.0.1:8200", "role=decode",
		"ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	bad := write(t, "bad.yaml", `apiVersion: llm-d.ai/v1
kind: EndpointPickerConfig
plugins:
- type: max-score-picker
  parameters: {maxNumOfEndpoint: 2}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: max-score-picker}]
`)
	_, err := runValidate(t, "--config", bad)
	if err == nil {
		t.Fatal("accepted a misspelled parameter")
	}
	for _, want := range []string{"bad.yaml", `"max-score-picker"`, "maxNumOfEndpoint", "accepted parameters: maxNumOfEndpoints"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	badEps := write(t, "eps.yaml", "endpoints:\n- {name: a, address: nowhere}\n")
	if _, err := runValidate(t, "--endpoints", badEps); err == nil || !strings.Contains(err.Error(), "eps.yaml: endpoints[0] (a)") {
		t.Fatalf("bad endpoints file: %v", err)
	}
	if _, err := runValidate(t); err == nil {
		t.Fatal("no flags accepted")
	}
	if _, err := runValidate(t, "--config", filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestValidateConfigMapManifest(t *testing.T) {
	var out bytes.Buffer
	if err := validateConfig(&out, "../../deploy/guides/pd-disaggregation/picker-config.yaml"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"disagg-profile-handler", "profile \"prefill\"", "τ = "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out.String())
		}
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "cm.yaml")
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\ndata:\n  other: x\n"), 0o644)
	if err := validateConfig(&out, bad); err == nil || !strings.Contains(err.Error(), "no EndpointPickerConfig") {
		t.Fatalf("want a clear error for a ConfigMap without a config, got %v", err)
	}
}
