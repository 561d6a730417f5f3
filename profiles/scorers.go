package profiles

import (
	"context"
	"encoding/json"
)

func init() {
	Register("queue-scorer", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		var p struct{}
		if err := DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		return &QueueScorer{NewNamed("queue-scorer", name)}, nil
	})
	Register("kv-cache-utilization-scorer", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		var p struct{}
		if err := DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		return &KVCacheUtilizationScorer{NewNamed("kv-cache-utilization-scorer", name)}, nil
	})
}

// QueueScorer scores (maxQ − q)/(maxQ − minQ) over the engines' waiting
// queues; all equal → 1.
type QueueScorer struct{ Named }

// Score implements Scorer.
func (q *QueueScorer) Score(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint, out []float64) {
	if len(eps) == 0 {
		return
	}
	minQ, maxQ := eps[0].Metrics().WaitingQueue, eps[0].Metrics().WaitingQueue
	for _, e := range eps[1:] {
		w := e.Metrics().WaitingQueue
		minQ, maxQ = min(minQ, w), max(maxQ, w)
	}
	for i, e := range eps {
		if maxQ == minQ {
			out[i] = 1
			continue
		}
		out[i] = float64(maxQ-e.Metrics().WaitingQueue) / float64(maxQ-minQ)
	}
}

// KVCacheUtilizationScorer scores 1 − KV-cache usage.
type KVCacheUtilizationScorer struct{ Named }

// Score implements Scorer.
func (k *KVCacheUtilizationScorer) Score(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint, out []float64) {
	for i, e := range eps {
		u := e.Metrics().KVUsage
		out[i] = 1 - min(max(u, 0), 1)
	}
}
