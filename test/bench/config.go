package bench

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Config is one EndpointPickerConfig under test.
type Config struct {
	Name string // file name without .yaml
	File string // path (or configs/<name>.yaml for shipped ones)
	Data []byte
}

// LoadConfig returns a shipped configuration by name or reads a file.
func LoadConfig(nameOrFile string) (*Config, error) {
	if isPath(nameOrFile) {
		b, err := os.ReadFile(nameOrFile)
		if err != nil {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
		return &Config{Name: strings.TrimSuffix(filepath.Base(nameOrFile), filepath.Ext(nameOrFile)), File: nameOrFile, Data: b}, nil
	}
	b, err := configFS.ReadFile(path.Join("configs", nameOrFile+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("unknown configuration %q (shipped: %s; or give a path to an EndpointPickerConfig)", nameOrFile, strings.Join(ConfigNames(), ", "))
	}
	return &Config{Name: nameOrFile, File: "test/bench/configs/" + nameOrFile + ".yaml", Data: b}, nil
}

// releaseMetric is the affinity filter's decision counter; its saturation
// release decisions carry a label value naming the release.
const releaseMetric = "spillway_affinity_decisions_total"

// releaseCount sums the saturation-release decisions recorded so far.
func (r *run) releaseCount() float64 { return countReleases(r.reg) }

func countReleases(g prometheus.Gatherer) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != releaseMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			if isRelease(m) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func isRelease(m *dto.Metric) bool {
	for _, l := range m.GetLabel() {
		v := strings.ToLower(l.GetValue())
		if strings.Contains(v, "release") || strings.Contains(v, "saturat") || strings.Contains(v, "spill") {
			return true
		}
	}
	return false
}
