package profiles

import (
	"fmt"
	"strconv"
	"time"
)

// PriorityHeader carries a request's priority; a negative priority makes the
// request sheddable when the pool is saturated.
const PriorityHeader = "x-spillway-priority"

// SaturationDetector is the config's saturationDetector section: the pool
// is saturated when no candidate has fresh metrics with a waiting queue
// below queueDepthThreshold and KV-cache usage below kvCacheUtilThreshold.
// Saturated pools answer sheddable requests (negative priority) with 429 so
// the gateway can retry elsewhere instead of queueing; other requests are
// still scheduled. Without the section nothing is shed.
type SaturationDetector struct {
	QueueDepthThreshold       int      `json:"queueDepthThreshold"`
	KVCacheUtilThreshold      float64  `json:"kvCacheUtilThreshold"`
	MetricsStalenessThreshold Duration `json:"metricsStalenessThreshold"`
}

func parseSaturation(raw []byte) (*SaturationDetector, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	d := &SaturationDetector{QueueDepthThreshold: 5, KVCacheUtilThreshold: 0.8, MetricsStalenessThreshold: Duration(200 * time.Millisecond)}
	if err := DecodeParams(raw, d); err != nil {
		return nil, fmt.Errorf("saturationDetector: %w", err)
	}
	if d.QueueDepthThreshold < 0 || d.KVCacheUtilThreshold <= 0 || d.KVCacheUtilThreshold > 1 || d.MetricsStalenessThreshold <= 0 {
		return nil, fmt.Errorf("saturationDetector: need queueDepthThreshold ≥ 0, 0 < kvCacheUtilThreshold ≤ 1, metricsStalenessThreshold > 0 (got %d, %g, %s)",
			d.QueueDepthThreshold, d.KVCacheUtilThreshold, d.MetricsStalenessThreshold.Std())
	}
	return d, nil
}

// hasCapacity reports whether ep can take more work now.
func (d *SaturationDetector) hasCapacity(ep *Endpoint, now time.Time) bool {
	m := ep.Metrics()
	if m.Stale || m.UpdatedAt.IsZero() || now.Sub(m.UpdatedAt) > d.MetricsStalenessThreshold.Std() {
		return false
	}
	return m.WaitingQueue < d.QueueDepthThreshold && m.KVUsage < d.KVCacheUtilThreshold
}

// Saturated reports whether no endpoint of eps has capacity.
func (d *SaturationDetector) Saturated(eps []*Endpoint, now time.Time) bool {
	for _, e := range eps {
		if d.hasCapacity(e, now) {
			return false
		}
	}
	return true
}

// sheddable reports whether the request asked to be shed under saturation.
func sheddable(req *Request) bool {
	v := req.Headers[PriorityHeader]
	if v == "" {
		return false
	}
	p, err := strconv.Atoi(v)
	return err == nil && p < 0
}
