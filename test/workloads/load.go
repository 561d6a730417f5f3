package workloads

import (
	"embed"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

//go:embed specs/*.yaml
var shipped embed.FS

// Names lists the shipped workloads.
func Names() []string {
	ents, _ := shipped.ReadDir("specs")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// Shipped returns the YAML of a shipped workload.
func Shipped(name string) ([]byte, bool) {
	b, err := shipped.ReadFile(path.Join("specs", name+".yaml"))
	return b, err == nil
}

// Load returns a shipped workload by name, or reads a spec file when
// nameOrFile is a path (contains a slash or ends in .yaml/.yml).
func Load(nameOrFile string) (*Spec, error) {
	if b, ok := Shipped(nameOrFile); ok && !strings.ContainsRune(nameOrFile, '/') {
		return Parse(nameOrFile+".yaml", b)
	}
	if strings.ContainsRune(nameOrFile, '/') || strings.HasSuffix(nameOrFile, ".yaml") || strings.HasSuffix(nameOrFile, ".yml") {
		b, err := os.ReadFile(nameOrFile)
		if err != nil {
			return nil, fmt.Errorf("reading workload: %w", err)
		}
		return Parse(nameOrFile, b)
	}
	return nil, fmt.Errorf("unknown workload %q (shipped: %s; or give a path to a YAML spec)", nameOrFile, strings.Join(Names(), ", "))
}
