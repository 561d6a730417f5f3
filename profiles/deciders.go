package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
)

// Disaggregation decision types (label decision_type of
// spillway_disagg_decisions_total and Result.Decision).
const (
	DecisionDecodeOnly          = "decode-only"
	DecisionPrefillDecode       = "prefill-decode"
	DecisionEncodeDecode        = "encode-decode"
	DecisionEncodePrefillDecode = "encode-prefill-decode"
)

// Reasons a disaggregation stage was skipped (label reason of
// spillway_disagg_decisions_total and Result.Reason). ReasonNone means no
// configured stage was skipped.
const (
	ReasonNone              = "none"
	ReasonInputTooShort     = "input_too_short"
	ReasonSuffixCached      = "suffix_cached"
	ReasonNoPrefillEndpoint = "no_prefill_endpoint"
	ReasonNoEncoder         = "no_encoder"
	ReasonNotMultimodal     = "not_multimodal"
	ReasonError             = "error"
)

// Decider says whether one disaggregation stage (remote prefill, or remote
// encode) runs for a request. Anyone can implement it: register a factory
// whose plugin satisfies Decider and name it in the disagg-profile-handler's
// deciders.prefill or deciders.encode parameter.
//
// decode is the endpoint the decode profile picked (nil when the prefill
// stage runs first, stageOrder prefill-first). When run is false, reason
// should be one of the Reason constants so that the decision can be
// explained; a non-nil err skips the stage with reason "error" (the request
// is still served, decode-only).
type Decider interface {
	Plugin
	Decide(ctx context.Context, req *Request, decode *Endpoint) (run bool, reason string, err error)
}

// PrefixMatcher is implemented by prefix-cache producers: how much of the
// request's prompt an endpoint already caches. The prefix-based-pd-decider
// uses it to learn the tokens cached on the chosen decode endpoint.
type PrefixMatcher interface {
	MatchOf(req *Request, ep *Endpoint) (matchedBlocks, totalBlocks, matchedTokens int)
}

// PrefixMatchFunc reports how much of req's prompt ep caches, like
// PrefixMatcher.MatchOf.
type PrefixMatchFunc func(req *Request, ep *Endpoint) (matchedBlocks, totalBlocks, matchedTokens int)

var prefixMatch atomic.Pointer[PrefixMatchFunc]

// RegisterPrefixMatch installs the process-wide prefix lookup that
// prefix-based-pd-decider falls back to when its config names no
// PrefixMatcher plugin (the prefill package registers its MatchOf). The
// last registration wins.
func RegisterPrefixMatch(f PrefixMatchFunc) { prefixMatch.Store(&f) }

func init() {
	Register("always-disagg-pd-decider", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		var p struct{}
		if err := DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		return &AlwaysDisaggPDDecider{NewNamed("always-disagg-pd-decider", name)}, nil
	})
	Register("always-disagg-multimodal-decider", func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
		var p struct{}
		if err := DecodeParams(raw, &p); err != nil {
			return nil, err
		}
		return &AlwaysDisaggMultimodalDecider{NewNamed("always-disagg-multimodal-decider", name)}, nil
	})
	Register("prefix-based-pd-decider", newPrefixBasedPDDecider)
}

// AlwaysDisaggPDDecider always runs the remote prefill stage.
type AlwaysDisaggPDDecider struct{ Named }

// Decide implements Decider.
func (AlwaysDisaggPDDecider) Decide(context.Context, *Request, *Endpoint) (bool, string, error) {
	return true, "", nil
}

// AlwaysDisaggMultimodalDecider runs the encode stage whenever the request
// carries multimodal items (images, audio, video).
type AlwaysDisaggMultimodalDecider struct{ Named }

// Decide implements Decider.
func (AlwaysDisaggMultimodalDecider) Decide(_ context.Context, req *Request, _ *Endpoint) (bool, string, error) {
	if !req.HasMultimodal() {
		return false, ReasonNotMultimodal, nil
	}
	return true, "", nil
}

type prefixDeciderParams struct {
	// NonCachedTokens: disaggregate only when at least this many prompt
	// tokens are NOT cached on the chosen decode endpoint.
	NonCachedTokens int `json:"nonCachedTokens"`
	// PromptTokens: disaggregate only prompts of at least this many tokens.
	PromptTokens int `json:"promptTokens"`
	// PrefixPluginName names the prefix producer to ask; empty = the first
	// plugin of the config that implements PrefixMatcher, if any.
	PrefixPluginName string `json:"prefixPluginName,omitempty"`
}

// PrefixBasedPDDecider disaggregates when the prompt is long enough and the
// part the decode endpoint does not cache is long enough to be worth a
// remote prefill (llm-d semantics). Without a prefix producer every token
// counts as not cached.
type PrefixBasedPDDecider struct {
	Named
	p       prefixDeciderParams
	matcher PrefixMatcher
}

func newPrefixBasedPDDecider(name string, raw json.RawMessage, h Handle) (Plugin, error) {
	var p prefixDeciderParams
	if err := DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.NonCachedTokens < 0 {
		return nil, fmt.Errorf("nonCachedTokens must be ≥ 0, got %d", p.NonCachedTokens)
	}
	if p.PromptTokens < 0 {
		return nil, fmt.Errorf("promptTokens must be ≥ 0, got %d", p.PromptTokens)
	}
	return &PrefixBasedPDDecider{Named: NewNamed("prefix-based-pd-decider", name), p: p}, nil
}

// Params implements Parameterized.
func (d *PrefixBasedPDDecider) Params() any { return d.p }

// Bind implements Binder: it finds the prefix producer.
func (d *PrefixBasedPDDecider) Bind(h Handle) error {
	if d.p.PrefixPluginName != "" {
		p, ok := h.Plugin(d.p.PrefixPluginName)
		if !ok {
			return fmt.Errorf("prefixPluginName %q names no plugin in the plugins list", d.p.PrefixPluginName)
		}
		m, ok := p.(PrefixMatcher)
		if !ok {
			return fmt.Errorf("prefixPluginName %q (type %s) does not report prefix matches", d.p.PrefixPluginName, p.TypedName().Type)
		}
		d.matcher = m
		return nil
	}
	for _, p := range h.Plugins() {
		if m, ok := p.(PrefixMatcher); ok {
			d.matcher = m
			return nil
		}
	}
	return nil
}

// Describe implements Describer.
func (d *PrefixBasedPDDecider) Describe() []string {
	if d.matcher == nil {
		if prefixMatch.Load() != nil {
			return []string{"cached tokens from the registered prefix index (profiles.RegisterPrefixMatch)"}
		}
		return []string{"no prefix producer: cached tokens on the decode endpoint count as 0"}
	}
	return []string{"cached tokens from " + d.matcher.(Plugin).TypedName().String()}
}

// Decide implements Decider.
func (d *PrefixBasedPDDecider) Decide(_ context.Context, req *Request, decode *Endpoint) (bool, string, error) {
	prompt := PromptTokens(req)
	if prompt < d.p.PromptTokens {
		return false, ReasonInputTooShort, nil
	}
	cached := 0
	if decode != nil {
		if d.matcher != nil {
			_, _, cached = d.matcher.MatchOf(req, decode)
		} else if f := prefixMatch.Load(); f != nil {
			_, _, cached = (*f)(req, decode)
		}
	}
	if prompt-cached < d.p.NonCachedTokens {
		return false, ReasonSuffixCached, nil
	}
	return true, "", nil
}

// PromptTokens returns the request's prompt size in tokens: the token
// producer's count when it ran, otherwise an estimate of 4 bytes per token
// (plus explicit token ids) so that deciders still work without one.
func PromptTokens(req *Request) int {
	if req.Tokens.Counted {
		return req.Tokens.Total()
	}
	n := len(req.Prompt)
	for _, m := range req.Messages {
		n += len(m.Role) + len(m.Text)
	}
	return n/4 + len(req.PromptIDs)
}
