package bench

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	"github.com/spillway-llm/spillway/test/workloads"
)

// Options configure a benchmark.
type Options struct {
	Workload *workloads.Spec
	Fleet    *Fleet
	Configs  []*Config
	Seed     uint64 // 0 = the workload's seed
	// Baseline names the configuration ratios compare against; "" picks
	// the round-robin one.
	Baseline string
	// KneeBoundMs overrides the workload's knee bound when > 0.
	KneeBoundMs float64
	// Progress receives one progress bar per run (nil = none).
	Progress io.Writer
	// Parallel runs up to this many configurations at once (0 = 1). Results
	// do not depend on it.
	Parallel int
}

// Run benchmarks every configuration in virtual time.
func Run(ctx context.Context, o Options) (*Results, error) {
	if o.Workload == nil || o.Fleet == nil || len(o.Configs) == 0 {
		return nil, fmt.Errorf("bench: a workload, a fleet and at least one configuration are required")
	}
	spec := o.Workload
	seed := o.Seed
	if seed == 0 {
		seed = spec.Seed
	}
	if seed == 0 {
		seed = 1
	}
	plan, err := spec.Plan(seed)
	if err != nil {
		return nil, err
	}
	res := &Results{SchemaVersion: SchemaVersion, Mode: "virtual", Seed: seed, Workload: workloadInfo(spec), Fleet: fleetInfo(o.Fleet)}
	if o.KneeBoundMs > 0 {
		res.Workload.KneeBoundMs = o.KneeBoundMs
	}
	res.Configs = make([]ConfigResult, len(o.Configs))
	par := max(o.Parallel, 1)
	par = min(par, runtime.GOMAXPROCS(0), len(o.Configs))
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var mu sync.Mutex // serialises progress output
	errs := make([]error, len(o.Configs))
	for i, c := range o.Configs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cr, err := runConfig(ctx, c, plan, o.Fleet, seed, &progressBar{w: o.Progress, tty: isTerminal(o.Progress), mu: &mu, name: c.Name})
			res.Configs[i] = cr
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if err := finish(res, o.Baseline); err != nil {
		return nil, err
	}
	return res, nil
}

// finish computes knees and the ratios against the baseline ("" = the
// round-robin configuration).
func finish(res *Results, baseline string) error {
	res.Baseline = pickBaseline(baseline, res.Configs)
	var base *Knee
	for i := range res.Configs {
		c := &res.Configs[i]
		c.Knee = findKnee(res.Workload.KneeMetric, res.Workload.KneeBoundMs, c.Levels)
		if c.Name == res.Baseline {
			base = &c.Knee
		}
	}
	if base == nil {
		return fmt.Errorf("baseline %q is not one of the configurations run", res.Baseline)
	}
	for i := range res.Configs {
		res.Configs[i].GoodputFraction = overallGoodput(res.Configs[i].Levels)
		k := &res.Configs[i].Knee
		if base.Throughput > 0 && k.Throughput > 0 {
			k.RatioVsBaseline = k.Throughput / base.Throughput
		}
	}
	return nil
}

func runConfig(ctx context.Context, c *Config, plan *workloads.Plan, fleet *Fleet, seed uint64, pb *progressBar) (ConfigResult, error) {
	cr := ConfigResult{Name: c.Name, File: c.File}
	spec := plan.Spec
	groups := levelGroups(plan)
	stage := time.Duration(spec.Arrival.DurationSeconds * float64(time.Second))
	for _, g := range groups {
		r, err := newRun(c, plan, fleet, seed)
		if err != nil {
			cr.Error = err.Error()
			pb.fail(err)
			return cr, nil
		}
		total := 0
		for _, li := range g {
			total += plan.Levels[li].Requests()
		}
		pb.start(levelLabel(spec, plan.Levels[g[0]].Load, len(g) > 1), total)
		r.progress = pb.update
		err = r.playLevels(ctx, g)
		addPredictorError(&cr, r.sched.Plugins())
		r.close()
		pb.end()
		if err != nil {
			return cr, err
		}
		byLevel := map[int][]record{}
		for _, rec := range r.records {
			byLevel[rec.level] = append(byLevel[rec.level], rec)
		}
		prev := 0.0
		for k, li := range g {
			start := time.Duration(0)
			if spec.Arrival.Ramp {
				start = time.Duration(k) * stage
			}
			rel := r.releases[k] - prev
			prev = r.releases[k]
			cr.Levels = append(cr.Levels, aggregate(plan.Levels[li].Load, byLevel[li], start, rel))
		}
	}
	return cr, nil
}

func levelLabel(s *workloads.Spec, load float64, ramp bool) string {
	unit := "qps"
	if s.Arrival.Mode == workloads.ModeClosed {
		unit = "conc"
	}
	if ramp {
		return fmt.Sprintf("%s ramp %g→%g", unit, s.Arrival.Levels[0], s.Arrival.Levels[len(s.Arrival.Levels)-1])
	}
	return fmt.Sprintf("%s %g", unit, load)
}

func workloadInfo(s *workloads.Spec) WorkloadInfo {
	unit := "qps"
	if s.Arrival.Mode == workloads.ModeClosed {
		unit = "concurrency"
	}
	return WorkloadInfo{Name: s.Name, Description: s.Description, ArrivalMode: s.Arrival.Mode, LoadUnit: unit,
		Levels: s.Arrival.Levels, Ramp: s.Arrival.Ramp, KneeMetric: s.Knee.Metric, KneeBoundMs: s.Knee.BoundMs,
		SLO: SLOInfo{TTFTMs: s.SLO.TTFTMs, TPOTMs: s.SLO.TPOTMs}}
}

func fleetInfo(f *Fleet) FleetInfo {
	fi := FleetInfo{Name: f.Name, Pools: map[string]int{}}
	for _, p := range f.Pools {
		role := p.Role
		if role == "" {
			role = "both"
		}
		fi.Pools[role] += p.Count
		fi.Endpoints += p.Count
	}
	return fi
}

// levelGroups lists the runs a plan needs: one run playing every level
// back to back when the workload ramps, else one cold run per level.
func levelGroups(plan *workloads.Plan) [][]int {
	if plan.Spec.Arrival.Ramp {
		all := make([]int, len(plan.Levels))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	}
	var groups [][]int
	for i := range plan.Levels {
		groups = append(groups, []int{i})
	}
	return groups
}
