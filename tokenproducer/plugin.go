package tokenproducer

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-llm/spillway/profiles"
)

// PluginType is the registered plugin type.
const PluginType = "token-producer"

func init() { profiles.Register(PluginType, newPlugin) }

// Producer is the token-producer plugin: it fills req.Tokens before the
// profiles run and learns from each response's usage.
type Producer struct {
	profiles.Named
	c   *Counter
	key string
}

var (
	_ profiles.Producer   = (*Producer)(nil)
	_ profiles.FinishHook = (*Producer)(nil)
	_ profiles.Describer  = (*Producer)(nil)
)

func newPlugin(name string, raw json.RawMessage, h profiles.Handle) (profiles.Plugin, error) {
	var p Params
	if err := profiles.DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	var reg prometheus.Registerer
	if h != nil {
		reg = h.Registerer()
	}
	c, err := New(p, reg)
	if err != nil {
		return nil, err
	}
	n := profiles.NewNamed(PluginType, name)
	return &Producer{Named: n, c: c, key: "tokenproducer.raw/" + n.TN.Name}, nil
}

// NewProducer builds the plugin from parameters, for callers outside a
// config file.
func NewProducer(name string, c *Counter) *Producer {
	n := profiles.NewNamed(PluginType, name)
	return &Producer{Named: n, c: c, key: "tokenproducer.raw/" + n.TN.Name}
}

// Counter returns the plugin's counter.
func (p *Producer) Counter() *Counter { return p.c }

// Produce implements profiles.Producer.
func (p *Producer) Produce(ctx context.Context, req *profiles.Request, eps []*profiles.Endpoint) error {
	if req.Tokens.Counted {
		// The caller already knows the counts (the simulator harness builds
		// requests from token ids): keep them.
		return nil
	}
	tc, raw, err := p.c.Count(ctx, req, eps)
	if err != nil {
		return err
	}
	req.Tokens = tc
	req.Put(p.key, raw)
	if req.Debug() {
		req.Annotate("", p.TN.Name, fmt.Sprintf("text %d + image %d tokens (%d items, backend %s), weighted %.0f", tc.Text, tc.Image, len(tc.Images), tc.Backend, tc.Weighted))
	}
	return nil
}

// OnFinish implements profiles.FinishHook: the reported prompt tokens feed
// the calibration.
func (p *Producer) OnFinish(req *profiles.Request, _ *profiles.Result, u profiles.Usage) {
	if !u.Reported || u.PromptTokens <= 0 {
		return
	}
	raw, ok := req.Get(p.key).(Raw)
	if !ok {
		return
	}
	p.c.Observe(raw, u.PromptTokens)
}

// Describe implements profiles.Describer.
func (p *Producer) Describe() []string {
	pp := p.c.p
	out := []string{fmt.Sprintf("text backend %s", pp.Backend)}
	if pp.Family != "" {
		out = append(out, "image family "+pp.Family)
	} else {
		out = append(out, "image family from the model name (qwen2-vl, qwen2.5-vl, qwen3-vl, llava-1.5, llava-next, else estimate)")
	}
	out = append(out, fmt.Sprintf("unknown image sizes: %dx%d; bad images: %s; remote fetch: %v; calibrate from usage: %v",
		pp.Estimate.Image.DefaultResolution.Width, pp.Estimate.Image.DefaultResolution.Height, pp.OnImageError, pp.RemoteFetch.Enabled, pp.CalibrateFromUsage))
	return out
}

// Order implements profiles.ProducerOrder: counts come first, the prefix
// and load producers consume them.
func (p *Producer) Order() int { return 10 }

// Params implements profiles.Parameterized for `spillway validate`.
func (p *Producer) Params() any { return p.c.p }
