package profiles

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Accepted config apiVersions.
var configAPIVersions = []string{"llm-d.ai/v1alpha1", "llm-d.ai/v1", "inference.networking.x-k8s.io/v1alpha1"}

// Config is an llm-d compatible EndpointPickerConfig.
type Config struct {
	APIVersion         string          `json:"apiVersion"`
	Kind               string          `json:"kind"`
	Plugins            []PluginSpec    `json:"plugins"`
	SchedulingProfiles []ProfileSpec   `json:"schedulingProfiles"`
	FeatureGates       []string        `json:"featureGates,omitempty"`
	SaturationDetector json.RawMessage `json:"saturationDetector,omitempty"`
	Data               json.RawMessage `json:"data,omitempty"`
	// Newer llm-d sections that spillway accepts but does not apply (listed
	// by `spillway validate`).
	DataLayer      json.RawMessage `json:"dataLayer,omitempty"`
	FlowControl    json.RawMessage `json:"flowControl,omitempty"`
	Parser         json.RawMessage `json:"parser,omitempty"`
	RequestHandler json.RawMessage `json:"requestHandler,omitempty"`

	file string
}

// PluginSpec is one entry of the plugins list.
type PluginSpec struct {
	Type       string          `json:"type"`
	Name       string          `json:"name,omitempty"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// ProfileSpec is one scheduling profile.
type ProfileSpec struct {
	Name    string      `json:"name"`
	Plugins []PluginRef `json:"plugins"`
}

// PluginRef is a plugin of a profile, by name, with a scorer weight.
type PluginRef struct {
	PluginRef string   `json:"pluginRef"`
	Weight    *float64 `json:"weight,omitempty"`
}

// ParseConfig decodes a config document strictly. file names the source in
// errors.
func ParseConfig(file string, data []byte) (*Config, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%s: %v (accepted fields: apiVersion, kind, plugins, schedulingProfiles, featureGates, saturationDetector, data, dataLayer, flowControl, parser, requestHandler; plugins take type, name, parameters; profiles take name, plugins [{pluginRef, weight}])", file, err)
	}
	c.file = file
	if c.APIVersion == "" {
		return nil, fmt.Errorf("%s: apiVersion is required (accepted: %s)", file, strings.Join(configAPIVersions, ", "))
	}
	ok := false
	for _, v := range configAPIVersions {
		ok = ok || v == c.APIVersion
	}
	if !ok {
		return nil, fmt.Errorf("%s: unsupported apiVersion %q (accepted: %s)", file, c.APIVersion, strings.Join(configAPIVersions, ", "))
	}
	if c.Kind != "" && c.Kind != "EndpointPickerConfig" {
		return nil, fmt.Errorf("%s: unsupported kind %q (accepted: EndpointPickerConfig)", file, c.Kind)
	}
	if len(c.SchedulingProfiles) == 0 {
		return nil, fmt.Errorf("%s: schedulingProfiles: at least one profile is required", file)
	}
	return &c, nil
}

// File returns the path the config was read from.
func (c *Config) File() string { return c.file }

// LoadConfigFile reads, parses and builds a config file into a Scheduler.
func LoadConfigFile(path string, opts Options) (*Scheduler, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	c, err := ParseConfig(path, data)
	if err != nil {
		return nil, err
	}
	if opts.ConfigDir == "" {
		opts.ConfigDir = filepath.Dir(path)
	}
	return New(c, opts)
}

// LoadConfigBytes parses and builds an in-memory config (name is used in
// errors).
func LoadConfigBytes(name string, data []byte, opts Options) (*Scheduler, error) {
	c, err := ParseConfig(name, data)
	if err != nil {
		return nil, err
	}
	return New(c, opts)
}
