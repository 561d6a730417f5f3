package director

import (
	_ "embed"

	"github.com/spillway-llm/spillway/profiles"
)

// DefaultConfig is the EndpointPickerConfig used when no --config is given.
//
//go:embed default-config.yaml
var DefaultConfig []byte

// DefaultConfigName names the built-in config in errors and `validate` output.
const DefaultConfigName = "<built-in default config>"

// LoadScheduler builds the scheduler from path, or from DefaultConfig when
// path is empty.
func LoadScheduler(path string, opts profiles.Options) (*profiles.Scheduler, error) {
	if path == "" {
		return profiles.LoadConfigBytes(DefaultConfigName, DefaultConfig, opts)
	}
	return profiles.LoadConfigFile(path, opts)
}
