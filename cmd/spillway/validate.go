package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/spillway-llm/spillway/discovery"
	"github.com/spillway-llm/spillway/profiles"
)

func init() { subcommands = append(subcommands, newValidateCmd) }

func newValidateCmd() *cobra.Command {
	var configFile, endpointsFile string
	cmd := &cobra.Command{
		Use:   "validate --config FILE [--endpoints FILE]",
		Short: "Check a picker config (and optionally an endpoints file) and print the resolved profiles",
		Long: `validate loads an EndpointPickerConfig file exactly as "serve" and "gateway" do
(apiVersion llm-d.ai/v1alpha1, llm-d.ai/v1 or inference.networking.x-k8s.io/v1alpha1)
and prints the resolved scheduling: the profile handler, the data producers,
and each profile's filter → scorer (with weight) → picker chain with every
plugin's parameters after defaults. Plugins the loader adds on its own (a
max-score-picker for a profile without a picker, single-profile-handler for a
one-profile file) are shown too.

A Kubernetes ConfigMap manifest (kind: ConfigMap, as shipped in
deploy/guides/*/picker-config.yaml) is accepted too: every data entry that
holds an EndpointPickerConfig is validated.

With --endpoints it also checks a static endpoints file (the format of
"serve --endpoints") and lists its endpoints.

It exits with status 1 and an error naming the file, the plugin, the bad field
and the accepted fields when anything is wrong; nothing is contacted.`,
		Example: `  spillway validate --config deploy/guides/pd-disaggregation/picker-config.yaml
  spillway validate --config config.yaml --endpoints endpoints.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile == "" && endpointsFile == "" {
				return errors.New("validate: --config FILE is required (and/or --endpoints FILE)")
			}
			out := cmd.OutOrStdout()
			if configFile != "" {
				if err := validateConfig(out, configFile); err != nil {
					return err
				}
			}
			if endpointsFile != "" {
				specs, err := discovery.LoadEndpointsFile(endpointsFile)
				if err != nil {
					return err
				}
				printEndpoints(out, endpointsFile, specs)
			}
			fmt.Fprintln(out, "ok")
			return nil
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "", "EndpointPickerConfig file to check")
	cmd.Flags().StringVar(&endpointsFile, "endpoints", "", "static endpoints file to check (YAML: endpoints: [{name, address, labels}])")
	return cmd
}

func printEndpoints(w io.Writer, file string, specs []discovery.Spec) {
	fmt.Fprintf(w, "endpoints: %s (%d)\n", file, len(specs))
	for _, sp := range specs {
		role := sp.Labels[profiles.RoleLabel]
		if role == "" {
			role = "(unlabelled)"
		}
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(sp.Labels)) {
			labels = append(labels, k+"="+sp.Labels[k])
		}
		fmt.Fprintf(w, "  %-20s %-22s role=%s", sp.Name, sp.Address, role)
		if len(labels) > 0 {
			fmt.Fprintf(w, " labels={%s}", strings.Join(labels, ","))
		}
		fmt.Fprintln(w)
	}
}

// validateConfig loads a config file, or each EndpointPickerConfig held in a
// ConfigMap manifest, and prints what it resolves to.
func validateConfig(out io.Writer, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("reading config: %w", err)
	}
	var head struct {
		Kind string            `json:"kind"`
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &head); err == nil && head.Kind == "ConfigMap" {
		n := 0
		for _, key := range slices.Sorted(maps.Keys(head.Data)) {
			if !strings.Contains(head.Data[key], "EndpointPickerConfig") {
				continue
			}
			name := file + ":data." + key
			s, err := profiles.LoadConfigBytes(name, []byte(head.Data[key]), profiles.Options{ConfigDir: filepath.Dir(file)})
			if err != nil {
				return err
			}
			fmt.Fprint(out, s.Describe())
			s.Close()
			n++
		}
		if n == 0 {
			return fmt.Errorf("%s: a ConfigMap with no EndpointPickerConfig in its data", file)
		}
		return nil
	}
	s, err := profiles.LoadConfigFile(file, profiles.Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprint(out, s.Describe())
	return nil
}
