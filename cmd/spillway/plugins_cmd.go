package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/spillway-llm/spillway/profiles"
)

func init() { subcommands = append(subcommands, newPluginsCmd) }

func newPluginsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "plugins",
		Short: "List every plugin type a config file can use, with its parameters and defaults",
		Long: `plugins lists the registered plugin types (llm-d names where they exist) and,
for each, the parameters it accepts with their defaults as JSON. Use the types
in the plugins list of an EndpointPickerConfig; "spillway validate" shows what
a given file resolves to.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listPlugins(cmd.OutOrStdout())
		},
	}
}

// catalogueHandle lets factories run with no scheduler around them.
type catalogueHandle struct{ ctx context.Context }

func (catalogueHandle) Plugin(string) (profiles.Plugin, bool) { return nil, false }
func (catalogueHandle) Plugins() []profiles.Plugin            { return nil }
func (catalogueHandle) Clock() profiles.Clock                 { return profiles.WallClock }
func (catalogueHandle) Registerer() prometheus.Registerer     { return prometheus.NewRegistry() }
func (h catalogueHandle) Context() context.Context            { return h.ctx }
func (catalogueHandle) ConfigDir() string                     { return "." }

func listPlugins(w io.Writer) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops any background work a factory started
	h := catalogueHandle{ctx: ctx}
	for _, t := range profiles.RegisteredTypes() {
		f, _ := profiles.Lookup(t)
		p, err := f(t, nil, h)
		if err != nil {
			fmt.Fprintf(w, "%s\n  (needs parameters: %v)\n", t, err)
			continue
		}
		line := "  no parameters"
		if pp, ok := p.(profiles.Parameterized); ok {
			if js, err := json.Marshal(pp.Params()); err == nil && string(js) != "{}" && string(js) != "null" {
				line = "  defaults: " + string(js)
			}
		}
		fmt.Fprintf(w, "%s\n%s\n", t, line)
	}
	return nil
}
