package bench

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/spillway-llm/spillway/test/sim"
)

// Fleet is a simulated deployment: pools of endpoints, each with a
// simulator profile and optional overrides of its constants.
//
//	name: h100-x4
//	pools:
//	  - role: both            # both | prefill | decode | encode
//	    count: 4
//	    profile: qwen3-32b-h100
//	    numGPUBlocks: 6000     # optional overrides
//	    maxNumSeqs: 128
//	scrapeIntervalMs: 100     # how often engine metrics reach the picker
type Fleet struct {
	Name             string `json:"name"`
	Description      string `json:"description,omitempty"`
	Pools            []Pool `json:"pools"`
	ScrapeIntervalMs int    `json:"scrapeIntervalMs,omitempty"`
}

// Pool is a group of identical endpoints.
type Pool struct {
	Role         string `json:"role"`
	Count        int    `json:"count"`
	Profile      string `json:"profile,omitempty"`
	NumGPUBlocks int    `json:"numGPUBlocks,omitempty"`
	MaxNumSeqs   int    `json:"maxNumSeqs,omitempty"`
	ChunkSize    int    `json:"maxNumBatchedTokens,omitempty"`
	ChunkTimeMs  int    `json:"chunkTimeMs,omitempty"`
}

//go:embed fleets/*.yaml
var fleetFS embed.FS

//go:embed configs/*.yaml
var configFS embed.FS

// FleetNames lists the shipped fleets.
func FleetNames() []string { return names(fleetFS, "fleets") }

// ConfigNames lists the shipped configurations.
func ConfigNames() []string { return names(configFS, "configs") }

func names(fs embed.FS, dir string) []string {
	ents, _ := fs.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}

// isPath reports whether s names a file rather than a shipped entry.
func isPath(s string) bool {
	return strings.ContainsRune(s, '/') || strings.HasSuffix(s, ".yaml") || strings.HasSuffix(s, ".yml")
}

// LoadFleet returns a shipped fleet by name or reads a fleet file.
func LoadFleet(nameOrFile string) (*Fleet, error) {
	var data []byte
	var err error
	file := nameOrFile
	if isPath(nameOrFile) {
		data, err = os.ReadFile(nameOrFile)
		if err != nil {
			return nil, fmt.Errorf("reading fleet: %w", err)
		}
	} else {
		file = nameOrFile + ".yaml"
		data, err = fleetFS.ReadFile(path.Join("fleets", file))
		if err != nil {
			return nil, fmt.Errorf("unknown fleet %q (shipped: %s; or give a path to a fleet YAML)", nameOrFile, strings.Join(FleetNames(), ", "))
		}
	}
	return ParseFleet(file, data)
}

// ParseFleet decodes and validates a fleet document.
func ParseFleet(file string, data []byte) (*Fleet, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	var f Fleet
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %v (fleet fields: name, description, pools [{role, count, profile, numGPUBlocks, maxNumSeqs, maxNumBatchedTokens, chunkTimeMs}], scrapeIntervalMs)", file, err)
	}
	if f.Name == "" {
		f.Name = strings.TrimSuffix(path.Base(file), ".yaml")
	}
	if f.ScrapeIntervalMs == 0 {
		f.ScrapeIntervalMs = 100
	}
	if f.ScrapeIntervalMs < 0 {
		return nil, fmt.Errorf("%s: scrapeIntervalMs must be > 0", file)
	}
	if len(f.Pools) == 0 {
		return nil, fmt.Errorf("%s: pools: at least one pool is required", file)
	}
	total := 0
	for i, p := range f.Pools {
		if _, err := sim.ParseRole(p.Role); err != nil {
			return nil, fmt.Errorf("%s: pools[%d]: %v", file, i, err)
		}
		if p.Count < 1 || p.Count > 1000 {
			return nil, fmt.Errorf("%s: pools[%d].count must be in [1, 1000], got %d", file, i, p.Count)
		}
		if p.NumGPUBlocks < 0 || p.MaxNumSeqs < 0 || p.ChunkSize < 0 || p.ChunkTimeMs < 0 {
			return nil, fmt.Errorf("%s: pools[%d]: overrides must be ≥ 0", file, i)
		}
		if _, err := sim.LookupProfile(p.Profile); err != nil {
			return nil, fmt.Errorf("%s: pools[%d]: %v", file, i, err)
		}
		total += p.Count
	}
	if total > 1000 {
		return nil, fmt.Errorf("%s: %d endpoints, more than 1000", file, total)
	}
	return &f, nil
}

// profile resolves a pool's simulator profile with its overrides.
func (p Pool) profile() sim.Profile {
	pr := sim.MustProfile(p.Profile)
	if p.NumGPUBlocks > 0 {
		pr.NumGPUBlocks = p.NumGPUBlocks
	}
	if p.MaxNumSeqs > 0 {
		pr.MaxNumSeqs = p.MaxNumSeqs
	}
	if p.ChunkSize > 0 {
		pr.MaxNumBatchedTokens = p.ChunkSize
	}
	if p.ChunkTimeMs > 0 {
		pr.ChunkTime = time.Duration(p.ChunkTimeMs) * time.Millisecond
	}
	return pr
}

// Specs expands the fleet into simulator endpoint specs, named
// "<role>-<i>" per pool.
func (f *Fleet) Specs() []sim.EndpointSpec {
	var out []sim.EndpointSpec
	n := 0
	for _, p := range f.Pools {
		role, _ := sim.ParseRole(p.Role)
		for i := range p.Count {
			n++
			out = append(out, sim.EndpointSpec{
				Name:    fmt.Sprintf("%s-%d", role, i),
				Address: fmt.Sprintf("10.0.%d.%d:8000", n/250, n%250+1),
				Role:    role,
				Profile: p.profile(),
			})
		}
	}
	return out
}

// Disaggregated reports whether the fleet has separate prefill, decode or
// encode pools.
func (f *Fleet) Disaggregated() bool {
	for _, p := range f.Pools {
		if p.Role != "" && p.Role != string(sim.RoleBoth) {
			return true
		}
	}
	return false
}
