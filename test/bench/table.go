package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints the per-level table and the knee summary.
func (r *Results) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	unit := r.Workload.LoadUnit
	fmt.Fprintf(w, "workload %s on fleet %s (%d endpoints), %s time, seed %d\n", r.Workload.Name, r.Fleet.Name, r.Fleet.Endpoints, r.Mode, r.Seed)
	fmt.Fprintf(tw, "config\t%s\treqs\tfail\tTTFT p50\tp90\tp99\tTPOT p90\te2e p90\tin tok/s\tout tok/s\tgoodput\thit\timbal\treleases\t\n", unit)
	for _, c := range r.Configs {
		if c.Error != "" {
			continue
		}
		for _, l := range c.Levels {
			fmt.Fprintf(tw, "%s\t%g\t%d\t%d\t%s\t%s\t%s\t%.1fms\t%s\t%.0f\t%.0f\t%.0f%%\t%.0f%%\t%.2f\t%.0f\t\n",
				c.Name, l.Load, l.Requests, l.Failed, dur(l.TTFTMs.P50), dur(l.TTFTMs.P90), dur(l.TTFTMs.P99), l.TPOTMs.P90, dur(l.E2EMs.P90),
				l.InputTokensPerSec, l.OutputTokensPerSec, 100*l.GoodputFraction, 100*l.PrefixHitRate, l.Imbalance, l.SaturationReleases)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Configs {
		if c.Error != "" {
			fmt.Fprintf(w, "%s: skipped: %s\n", c.Name, firstLine(c.Error))
		}
	}
	fmt.Fprintf(w, "\nknee: highest %s with %s ≤ %gms; ratio = throughput at the knee vs %s\n", unit, r.Workload.KneeMetric, r.Workload.KneeBoundMs, r.Baseline)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "config\tknee %s\tthroughput\tvs %s\tgoodput (all levels)\tpredictor MAPE TTFT / TPOT\t\n", unit, r.Baseline)
	for _, c := range r.Configs {
		if c.Error != "" {
			continue
		}
		k := c.Knee
		knee := "below range"
		if k.Index >= 0 {
			knee = fmt.Sprintf("%g", k.Load)
			if !k.Reached {
				knee = "≥ " + knee
			}
		}
		ratio := "n/a"
		if k.RatioVsBaseline > 0 {
			ratio = fmt.Sprintf("%.2f×", k.RatioVsBaseline)
		}
		mape := "-"
		if p := c.Predictor; p != nil {
			mape = fmt.Sprintf("%.0f%% / %.0f%%", 100*p.TTFTMAPE, 100*p.TPOTMAPE)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f %s\t%s\t%.1f%%\t%s\t\n", c.Name, knee, k.Throughput, k.ThroughputUnit, ratio, 100*c.GoodputFraction, mape)
	}
	return tw.Flush()
}

func dur(msv float64) string {
	if msv >= 10000 {
		return fmt.Sprintf("%.1fs", msv/1000)
	}
	return fmt.Sprintf("%.0fms", msv)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
