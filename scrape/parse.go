package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/spillway-llm/spillway/profiles"
)

// Engine metric names (protocols.md §4). OpenMetrics exposition names
// counter families without _total and info families without _info, so both
// spellings are looked up.
const (
	vllmWaiting       = "vllm:num_requests_waiting"
	vllmRunning       = "vllm:num_requests_running"
	vllmKVUsage       = "vllm:kv_cache_usage_perc"
	vllmGPUCacheUsage = "vllm:gpu_cache_usage_perc" // before vLLM v0.10
	vllmCacheConfig   = "vllm:cache_config_info"
	vllmLoRA          = "vllm:lora_requests_info"
	vllmPrefixQueries = "vllm:prefix_cache_queries_total"
	vllmPrefixHits    = "vllm:prefix_cache_hits_total"
	sglangQueue       = "sglang:num_queue_reqs"
	sglangRunning     = "sglang:num_running_reqs"
	sglangTokenUsage  = "sglang:token_usage"
)

// errNoEngineMetrics marks an exposition without any engine load metric: the
// address probably is not a vLLM or SGLang server, and reporting it as an
// idle engine would attract all traffic.
var errNoEngineMetrics = errors.New("no vLLM or SGLang load metrics (vllm:num_requests_waiting, sglang:num_queue_reqs, ...) in the exposition")

// families is a parsed exposition by family name.
type families map[string]*dto.MetricFamily

func (f families) get(names ...string) *dto.MetricFamily {
	for _, n := range names {
		if mf, ok := f[n]; ok && len(mf.GetMetric()) > 0 {
			return mf
		}
		// OpenMetrics spelling: counter without _total, info without _info.
		if b, ok := strings.CutSuffix(n, "_total"); ok {
			if mf, ok := f[b]; ok && len(mf.GetMetric()) > 0 {
				return mf
			}
		}
		if b, ok := strings.CutSuffix(n, "_info"); ok {
			if mf, ok := f[b]; ok && len(mf.GetMetric()) > 0 {
				return mf
			}
		}
	}
	return nil
}

// value returns a sample's value whatever its declared type.
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return math.NaN()
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// sum adds a family's samples: one engine may expose a series per model_name
// (base model and LoRA adapters) or per engine (data parallel ranks).
func sum(mf *dto.MetricFamily) float64 {
	s := 0.0
	for _, m := range mf.GetMetric() {
		if v := value(m); !math.IsNaN(v) {
			s += v
		}
	}
	return s
}

// maxOf returns the largest sample: a usage fraction of several series is
// as full as its fullest pool, and a sum of fractions would exceed 1.
func maxOf(mf *dto.MetricFamily) float64 {
	best := 0.0
	for _, m := range mf.GetMetric() {
		if v := value(m); !math.IsNaN(v) && v > best {
			best = v
		}
	}
	return best
}

// toMetrics maps an exposition onto profiles.Metrics. staleBefore rejects
// samples carrying an explicit timestamp older than it (zero disables).
func toMetrics(f families, now, staleBefore time.Time) (*profiles.Metrics, error) {
	m := &profiles.Metrics{UpdatedAt: now}
	found := false
	var used [8]*dto.MetricFamily
	n := 0
	use := func(mf *dto.MetricFamily) *dto.MetricFamily {
		if mf != nil && n < len(used) {
			used[n] = mf
			n++
		}
		return mf
	}
	if mf := use(f.get(vllmWaiting, sglangQueue)); mf != nil {
		m.WaitingQueue, found = int(math.Round(sum(mf))), true
	}
	if mf := use(f.get(vllmRunning, sglangRunning)); mf != nil {
		m.Running, found = int(math.Round(sum(mf))), true
	}
	if mf := use(f.get(vllmKVUsage, vllmGPUCacheUsage, sglangTokenUsage)); mf != nil {
		m.KVUsage, found = min(max(maxOf(mf), 0), 1), true
	}
	if !found {
		return nil, errNoEngineMetrics
	}
	if mf := use(f.get(vllmPrefixQueries)); mf != nil {
		m.PrefixQueries = sum(mf)
	}
	if mf := use(f.get(vllmPrefixHits)); mf != nil {
		m.PrefixHits = sum(mf)
	}
	if mf := f.get(vllmCacheConfig); mf != nil {
		for _, s := range mf.GetMetric() {
			bs, err1 := strconv.Atoi(label(s, "block_size"))
			nb, err2 := strconv.Atoi(label(s, "num_gpu_blocks"))
			if err1 == nil && bs > 0 {
				m.BlockSize = bs
			}
			if err2 == nil && nb > 0 {
				m.NumGPUBlocks = nb
			}
			if m.BlockSize > 0 && m.NumGPUBlocks > 0 {
				break
			}
		}
	}
	if mf := f.get(vllmLoRA); mf != nil {
		// vLLM sets the info gauge's value to the time of the update; the
		// newest sample is the current adapter state.
		var newest *dto.Metric
		for _, s := range mf.GetMetric() {
			if newest == nil || value(s) > value(newest) {
				newest = s
			}
		}
		m.RunningLoRAs = splitList(label(newest, "running_lora_adapters"))
		m.WaitingLoRAs = splitList(label(newest, "waiting_lora_adapters"))
		m.MaxLoRA, _ = strconv.Atoi(label(newest, "max_lora"))
	}
	if !staleBefore.IsZero() {
		for _, mf := range used[:n] {
			for _, s := range mf.GetMetric() {
				if ts := s.GetTimestampMs(); ts != 0 && time.UnixMilli(ts).Before(staleBefore) {
					return nil, fmt.Errorf("%s sample timestamp %s is older than the staleness limit", mf.GetName(), time.UnixMilli(ts).UTC().Format(time.RFC3339Nano))
				}
			}
		}
	}
	return m, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// wanted holds every family and sample name the mapping reads, in both the
// classic text and the OpenMetrics spelling.
var wanted = func() map[string]struct{} {
	m := map[string]struct{}{}
	for _, n := range []string{vllmWaiting, vllmRunning, vllmKVUsage, vllmGPUCacheUsage, vllmCacheConfig,
		vllmLoRA, vllmPrefixQueries, vllmPrefixHits, sglangQueue, sglangRunning, sglangTokenUsage} {
		m[n] = struct{}{}
		if b, ok := strings.CutSuffix(n, "_total"); ok {
			m[b] = struct{}{}
		}
		if b, ok := strings.CutSuffix(n, "_info"); ok {
			m[b] = struct{}{}
		}
	}
	return m
}()

// filterLines appends to dst the lines of a text or OpenMetrics exposition
// that belong to the families spillway reads, and drops the rest. An engine
// exposes ~150 lines, mostly latency histograms; handing the parser only the
// dozen lines it needs cuts the scrape's CPU by an order of magnitude.
// Lines it cannot classify are kept, so the parser still sees (and rejects)
// malformed input.
func filterLines(dst, src []byte) []byte {
	for len(src) > 0 {
		line := src
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i+1], src[i+1:]
		} else {
			src = nil
		}
		if keepLine(line) {
			dst = append(dst, line...)
		}
	}
	if len(dst) > 0 && dst[len(dst)-1] != '\n' {
		dst = append(dst, '\n')
	}
	return dst
}

func keepLine(line []byte) bool {
	s := bytes.TrimLeft(line, " \t")
	if len(s) == 0 || s[0] == '\n' || s[0] == '\r' {
		return false
	}
	if s[0] == '#' {
		rest := bytes.TrimLeft(s[1:], " \t")
		switch {
		case bytes.HasPrefix(rest, []byte("EOF")):
			return true // OpenMetrics terminator
		case bytes.HasPrefix(rest, []byte("TYPE ")):
			return isWanted(bytes.TrimLeft(rest[5:], " \t"))
		}
		return false // HELP, UNIT and plain comments do not feed the mapping
	}
	if s[0] == '{' {
		return true // UTF-8 quoted name: let the parser decide
	}
	return isWanted(s)
}

// isWanted reports whether the metric name that starts s is one we read.
func isWanted(s []byte) bool {
	end := 0
	for end < len(s) && s[end] != '{' && s[end] != ' ' && s[end] != '\t' && s[end] != '\r' && s[end] != '\n' {
		end++
	}
	_, ok := wanted[string(s[:end])]
	return ok
}
