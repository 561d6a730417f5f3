package bench

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spillway-llm/spillway/test/workloads"
)

// CommandOptions are `spillway bench`'s flags.
type CommandOptions struct {
	Workload    string // name or file
	Fleet       string // name or file; "" = the workload's fleet
	Configs     string // comma-separated names or files
	Out         string // output directory ("" = no files)
	Seed        uint64
	Baseline    string
	KneeBoundMs float64
	Parallel    int
	// Real drives real-HTTP simulators through the gateway instead of
	// virtual time; TimeScale speeds them up (default 4).
	Real      bool
	TimeScale float64
	// Spec, when set, is used instead of loading Workload.
	Spec *workloads.Spec
}

// DefaultConfigs is what `spillway bench` compares when --configs is not
// given: the seed's configurations that exist as plugins, or the per-pool
// stacks on a disaggregated fleet.
const DefaultConfigs = "k8-round-robin,token-load-aware,active-request-aware,legacy-blend"

// DefaultPDConfigs and DefaultEPDConfigs are the per-pool comparisons.
const (
	DefaultPDConfigs  = "pd-all-round-robin,pd-prefill-round-robin,pd-decode-round-robin,pd-matched"
	DefaultEPDConfigs = "epd-all-round-robin,epd-encode-round-robin,epd-prefill-round-robin,epd-decode-round-robin,epd-matched"
)

// RunCommand resolves the options, runs the benchmark, prints the table
// to stdout and progress to stderr, and writes results.json and
// report.html when Out is set. It returns the results and the report path.
func RunCommand(ctx context.Context, o CommandOptions, stdout, stderr io.Writer) (*Results, string, error) {
	spec := o.Spec
	var err error
	if spec == nil {
		if spec, err = workloads.Load(o.Workload); err != nil {
			return nil, "", err
		}
	}
	fleetName := o.Fleet
	if fleetName == "" {
		fleetName = spec.Fleet
	}
	if fleetName == "" {
		return nil, "", fmt.Errorf("workload %s names no fleet; give --fleet", spec.Name)
	}
	fl, err := LoadFleet(fleetName)
	if err != nil {
		return nil, "", err
	}
	list := o.Configs
	if list == "" {
		list = DefaultConfigs
		if fl.Disaggregated() {
			list = DefaultPDConfigs
			for _, p := range fl.Pools {
				if p.Role == "encode" {
					list = DefaultEPDConfigs
				}
			}
		}
	}
	var cfgs []*Config
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		c, err := LoadConfig(n)
		if err != nil {
			return nil, "", err
		}
		if seen[c.Name] {
			return nil, "", fmt.Errorf("configuration %s listed twice", c.Name)
		}
		seen[c.Name] = true
		cfgs = append(cfgs, c)
	}
	if len(cfgs) == 0 {
		return nil, "", fmt.Errorf("--configs names no configuration")
	}
	opts := Options{Workload: spec, Fleet: fl, Configs: cfgs, Seed: o.Seed, Baseline: o.Baseline,
		KneeBoundMs: o.KneeBoundMs, Progress: stderr, Parallel: o.Parallel}
	var res *Results
	if o.Real {
		res, err = RunReal(ctx, opts, RealOptions{TimeScale: o.TimeScale})
	} else {
		res, err = Run(ctx, opts)
	}
	if err != nil {
		return nil, "", err
	}
	fmt.Fprintln(stdout)
	if err := res.WriteTable(stdout); err != nil {
		return nil, "", err
	}
	report := ""
	if o.Out != "" {
		if report, err = res.WriteDir(o.Out); err != nil {
			return nil, "", err
		}
		fmt.Fprintf(stdout, "\nresults: %s/results.json\nreport:  %s\n", strings.TrimRight(o.Out, "/"), report)
	}
	return res, report, nil
}
