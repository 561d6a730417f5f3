package bench

import (
	"math"
	"sort"
	"strings"
	"time"

	"github.com/spillway-llm/spillway/test/workloads"
)

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	sort.Float64s(v)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(v)))) - 1
		return v[min(max(i, 0), len(v)-1)]
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return Percentiles{P50: q(0.50), P90: q(0.90), P99: q(0.99), Mean: sum / float64(len(v))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// aggregate summarises one level's records; start is the level's start in
// virtual time.
func aggregate(load float64, recs []record, start time.Duration, releases float64) LevelResult {
	lr := LevelResult{Load: load, Requests: len(recs), RequestsPerEndpoint: map[string]int{}, SaturationReleases: releases}
	var ttft, tpot, e2e []float64
	var in, out, cached, good int
	end := start
	dest := map[string]int{}
	for _, r := range recs {
		if r.endpoint != "" {
			lr.RequestsPerEndpoint[r.endpoint]++
			dest[r.endpoint]++
		}
		if r.prefill != "" {
			lr.RequestsPerEndpoint[r.prefill]++
		}
		if r.failed {
			lr.Failed++
			continue
		}
		lr.Completed++
		end = max(end, r.finish)
		t := ms(r.first - r.issued)
		ttft = append(ttft, t)
		e2e = append(e2e, ms(r.finish-r.issued))
		tp := 0.0
		if r.output > 1 {
			tp = ms(r.finish-r.first) / float64(r.output-1)
			tpot = append(tpot, tp)
		}
		in += r.prompt
		out += r.output
		cached += r.cached
		if (r.slo.TTFTMs == 0 || t <= r.slo.TTFTMs) && (r.slo.TPOTMs == 0 || tp <= r.slo.TPOTMs) {
			good++
		}
	}
	lr.TTFTMs, lr.TPOTMs, lr.E2EMs = percentiles(ttft), percentiles(tpot), percentiles(e2e)
	if d := (end - start).Seconds(); d > 0 {
		lr.DurationSeconds = d
		lr.InputTokensPerSec = float64(in) / d
		lr.OutputTokensPerSec = float64(out) / d
		lr.GoodputPerSec = float64(good) / d
	}
	if lr.Requests > 0 {
		lr.GoodputFraction = float64(good) / float64(lr.Requests)
	}
	if in > 0 {
		lr.PrefixHitRate = float64(cached) / float64(in)
	}
	if len(dest) > 0 {
		mx, sum := 0, 0
		for _, n := range dest {
			mx, sum = max(mx, n), sum+n
		}
		lr.Imbalance = float64(mx) / (float64(sum) / float64(len(dest)))
	}
	return lr
}

// kneeMetric reads the knee metric of a level.
func kneeMetric(metric string, l LevelResult) float64 {
	switch metric {
	case workloads.KneeTPOTP90:
		return l.TPOTMs.P90
	case workloads.KneeE2EP90:
		return l.E2EMs.P90
	default:
		return l.TTFTMs.P90
	}
}

// findKnee returns the highest level before the metric first crosses the
// bound. A level where requests failed counts as crossed.
func findKnee(metric string, bound float64, levels []LevelResult) Knee {
	k := Knee{Index: -1, ThroughputUnit: "input_tokens/s"}
	if metric == workloads.KneeTPOTP90 {
		k.ThroughputUnit = "output_tokens/s"
	}
	for i, l := range levels {
		if kneeMetric(metric, l) > bound || l.Failed > 0 || l.Completed == 0 {
			k.Reached = true
			break
		}
		k.Index = i
	}
	if k.Index >= 0 {
		l := levels[k.Index]
		k.Load = l.Load
		k.Throughput = l.InputTokensPerSec
		if metric == workloads.KneeTPOTP90 {
			k.Throughput = l.OutputTokensPerSec
		}
	}
	return k
}

// pickBaseline chooses the round-robin configuration the ratios compare
// against: the one named, else the first whose name says round-robin,
// else the first.
func pickBaseline(named string, cfgs []ConfigResult) string {
	if named != "" {
		return named
	}
	for _, c := range cfgs {
		if strings.Contains(c.Name, "all-round-robin") || c.Name == "k8-round-robin" {
			return c.Name
		}
	}
	for _, c := range cfgs {
		if strings.Contains(c.Name, "round-robin") {
			return c.Name
		}
	}
	if len(cfgs) > 0 {
		return cfgs[0].Name
	}
	return ""
}
