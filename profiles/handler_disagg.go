package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Routing headers the disagg handler sets on Result.Headers (protocols.md
// §2). The destination header carries the decode endpoint.
const (
	// HeaderPrefillerHostPort names the prefill endpoint ("ip:port"); absent
	// when the decode endpoint prefills locally.
	HeaderPrefillerHostPort = "x-prefiller-host-port"
	// HeaderEncoderHostsPorts lists one encoder per multimodal item of the
	// request, in the order the items appear in the body
	// ("ip:port,ip:port,..."; an address repeats when one encoder serves
	// several items). The sidecar sends item i to entry i mod len(list), so
	// a shorter list (one encoder for everything) is also valid.
	HeaderEncoderHostsPorts = "x-encoder-hosts-ports"
)

// EncodeItemKey is the Request state key (Request.Get) under which the
// disagg handler publishes, while the encode profile runs, the index into
// Request.Multimodal of the item being placed. The encode profile runs once
// per item so that encoder-cache affinity can follow each image.
const EncodeItemKey = "spillway.encode-item"

// EncodeItem returns the multimodal item the encode profile is placing, or
// -1 when the encode profile is not running per item.
func EncodeItem(req *Request) int {
	if v, ok := req.Get(EncodeItemKey).(int); ok {
		return v
	}
	return -1
}

// EncodePlacedKey is the Request state key under which the disagg handler
// publishes, while the encode profile places item i, the encoders already
// chosen for items 0..i-1 of the same request.
const EncodePlacedKey = "spillway.encode-placed"

// EncodePlaced returns the encoders already chosen for earlier items of the
// request while the encode profile runs per item (nil otherwise). Load
// scorers count them so that one request's items spread over encoders
// before its bookings exist.
func EncodePlaced(req *Request) []*Endpoint {
	v, _ := req.Get(EncodePlacedKey).([]*Endpoint)
	return v
}

// Stage orders of the disagg handler.
const (
	StageOrderDecodeFirst  = "decode-first"
	StageOrderPrefillFirst = "prefill-first"
)

type disaggParams struct {
	StageOrder string `json:"stageOrder"`
	Profiles   struct {
		Decode  string `json:"decode"`
		Prefill string `json:"prefill"`
		Encode  string `json:"encode"`
	} `json:"profiles"`
	Deciders struct {
		Prefill string `json:"prefill,omitempty"`
		Encode  string `json:"encode,omitempty"`
	} `json:"deciders"`
}

// DisaggProfileHandler runs the decode, encode and prefill profiles of a
// disaggregated pool. The decode pick is the destination; the prefill and
// encode picks become routing headers for the decode pod's sidecar.
//
// decode-first (default): decode runs first and, when it finds no endpoint,
// the request fails; then the encode decider and profile (once per
// multimodal item), then the prefill decider, which knows the decode pick,
// and the prefill profile. prefill-first runs encode and prefill before
// decode, so that the decode profile can see the prefill pick
// (CycleState.Results); the prefill decider then gets a nil decode endpoint.
//
// A stage whose profile is not in the config is not configured and never
// runs. A configured stage with no decider named uses
// always-disagg-pd-decider (prefill) or always-disagg-multimodal-decider
// (encode). A stage that cannot run (decider declines or fails, profile
// finds no endpoint) is skipped and the request is still served, with the
// reason recorded in Result.Reason and spillway_disagg_decisions_total.
type DisaggProfileHandler struct {
	Named
	p              disaggParams
	prefillDecider Decider
	encodeDecider  Decider
	counters       [4][7]prometheus.Counter // [decision][reason]
}

var (
	decisionTypes = [4]string{DecisionDecodeOnly, DecisionPrefillDecode, DecisionEncodeDecode, DecisionEncodePrefillDecode}
	reasonLabels  = [7]string{ReasonNone, ReasonInputTooShort, ReasonSuffixCached, ReasonNoPrefillEndpoint, ReasonNoEncoder, ReasonNotMultimodal, ReasonError}
)

func init() { Register("disagg-profile-handler", newDisaggProfileHandler) }

func newDisaggProfileHandler(name string, raw json.RawMessage, h Handle) (Plugin, error) {
	var p disaggParams
	p.StageOrder = StageOrderDecodeFirst
	p.Profiles.Decode, p.Profiles.Prefill, p.Profiles.Encode = "decode", "prefill", "encode"
	if err := DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	switch p.StageOrder {
	case StageOrderDecodeFirst, StageOrderPrefillFirst:
	default:
		return nil, fmt.Errorf("stageOrder %q (accepted: %s, %s)", p.StageOrder, StageOrderDecodeFirst, StageOrderPrefillFirst)
	}
	if p.Profiles.Decode == "" {
		return nil, fmt.Errorf("profiles.decode must not be empty")
	}
	d := &DisaggProfileHandler{Named: NewNamed("disagg-profile-handler", name), p: p}
	vec := RegisterCollector(h.Registerer(), prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Name: "disagg_decisions_total",
		Help: "Disaggregation decisions by type (decode-only, prefill-decode, encode-decode, encode-prefill-decode) and, when a stage was skipped, why.",
	}, []string{"decision_type", "reason"}))
	for i, t := range decisionTypes {
		for j, r := range reasonLabels {
			d.counters[i][j] = vec.WithLabelValues(t, r)
		}
	}
	return d, nil
}

// Params implements Parameterized.
func (d *DisaggProfileHandler) Params() any { return d.p }

// Bind implements Binder: it resolves the deciders by name.
func (d *DisaggProfileHandler) Bind(h Handle) error {
	resolve := func(field, name string, def Decider) (Decider, error) {
		if name == "" {
			return def, nil
		}
		p, ok := h.Plugin(name)
		if !ok {
			return nil, fmt.Errorf("%s %q names no plugin in the plugins list", field, name)
		}
		dec, ok := p.(Decider)
		if !ok {
			return nil, fmt.Errorf("%s %q (type %s) is not a decider", field, name, p.TypedName().Type)
		}
		return dec, nil
	}
	var err error
	if d.prefillDecider, err = resolve("deciders.prefill", d.p.Deciders.Prefill, &AlwaysDisaggPDDecider{NewNamed("always-disagg-pd-decider", "")}); err != nil {
		return err
	}
	d.encodeDecider, err = resolve("deciders.encode", d.p.Deciders.Encode, &AlwaysDisaggMultimodalDecider{NewNamed("always-disagg-multimodal-decider", "")})
	return err
}

// Describe implements Describer.
func (d *DisaggProfileHandler) Describe() []string {
	return []string{
		fmt.Sprintf("stage order %s; decode profile %q, prefill %q (decider %s), encode %q (decider %s)",
			d.p.StageOrder, d.p.Profiles.Decode, d.p.Profiles.Prefill, d.prefillDecider.TypedName(), d.p.Profiles.Encode, d.encodeDecider.TypedName()),
	}
}

// Handle implements ProfileHandler.
func (d *DisaggProfileHandler) Handle(ctx context.Context, req *Request, run ProfileRunner) (*Result, error) {
	if !run.Has(d.p.Profiles.Decode) {
		return nil, &StatusError{Code: http.StatusInternalServerError, Message: fmt.Sprintf("disagg-profile-handler: no scheduling profile named %q (profiles.decode)", d.p.Profiles.Decode)}
	}
	res := &Result{Primary: d.p.Profiles.Decode, Profiles: make(map[string]*ProfileResult, 3), Headers: make(map[string]string, 2)}
	var encoded, prefilled bool
	var encReason, preReason string
	if d.p.StageOrder == StageOrderDecodeFirst {
		dr, err := run.Run(ctx, d.p.Profiles.Decode, req)
		if err != nil {
			return nil, err
		}
		res.Profiles[d.p.Profiles.Decode] = dr
		encoded, encReason = d.encodeStage(ctx, req, run, res, dr.Target())
		prefilled, preReason = d.prefillStage(ctx, req, run, res, dr.Target())
	} else {
		encoded, encReason = d.encodeStage(ctx, req, run, res, nil)
		prefilled, preReason = d.prefillStage(ctx, req, run, res, nil)
		dr, err := run.Run(ctx, d.p.Profiles.Decode, req)
		if err != nil {
			return nil, err
		}
		res.Profiles[d.p.Profiles.Decode] = dr
	}
	ti := 0
	if prefilled {
		ti |= 1
	}
	if encoded {
		ti |= 2
	}
	res.Decision = decisionTypes[ti]
	// One label per decision keeps the series bounded: the prefill stage's
	// reason wins because it is the costlier stage to skip.
	res.Reason = ReasonNone
	if preReason != "" {
		res.Reason = preReason
	} else if encReason != "" {
		res.Reason = encReason
	}
	d.counters[ti][reasonIndex(res.Reason)].Inc()
	if req.Debug() {
		req.Annotate("", d.TypedName().Name, fmt.Sprintf("decision %s (prefill skipped: %s, encode skipped: %s)", res.Decision, orNone(preReason), orNone(encReason)))
	}
	return res, nil
}

func orNone(s string) string {
	if s == "" {
		return "no"
	}
	return s
}

func reasonIndex(r string) int {
	for i, v := range reasonLabels {
		if v == r {
			return i
		}
	}
	return len(reasonLabels) - 1 // an unknown reason from a third-party decider counts as error
}

// decide runs a decider, turning an error or an unknown reason into a
// bounded label.
func decide(ctx context.Context, dec Decider, req *Request, decode *Endpoint, fallback string) (bool, string) {
	ok, reason, err := dec.Decide(ctx, req, decode)
	if err != nil {
		if req.Debug() {
			req.Annotate("", dec.TypedName().Name, "decider failed: "+err.Error())
		}
		return false, ReasonError
	}
	if ok {
		return true, ""
	}
	if reason == "" {
		reason = fallback
	}
	return false, reasonLabels[reasonIndex(reason)]
}

// encodeStage places each multimodal item on an encoder. The encode profile
// runs once per item (items with the same content hash share one run);
// Result.Profiles[encode].Targets[i] is item i's encoder. If any item finds
// no encoder the whole stage is skipped: a partial handoff would still make
// the prefiller encode the rest.
func (d *DisaggProfileHandler) encodeStage(ctx context.Context, req *Request, run ProfileRunner, res *Result, decode *Endpoint) (bool, string) {
	name := d.p.Profiles.Encode
	if name == "" || !run.Has(name) {
		return false, ""
	}
	ok, reason := decide(ctx, d.encodeDecider, req, decode, ReasonNotMultimodal)
	if !ok {
		return false, reason
	}
	if !req.HasMultimodal() {
		return false, ReasonNotMultimodal
	}
	n := len(req.Multimodal)
	targets := make([]*Endpoint, n)
	candidates := 0
	defer func() { req.Put(EncodeItemKey, -1); req.Put(EncodePlacedKey, nil) }()
	for i := range n {
		if j := sameHashItem(req, i); j >= 0 {
			targets[i] = targets[j]
			continue
		}
		req.Put(EncodeItemKey, i)
		req.Put(EncodePlacedKey, targets[:i])
		pr, err := run.Run(ctx, name, req)
		if err != nil {
			if req.Debug() {
				req.Annotate(name, d.TypedName().Name, fmt.Sprintf("item %d: %v", i, err))
			}
			if HTTPStatus(err) == http.StatusServiceUnavailable {
				return false, ReasonNoEncoder
			}
			return false, ReasonError
		}
		targets[i] = pr.Target()
		candidates = pr.Candidates
	}
	res.Profiles[name] = &ProfileResult{Profile: name, Targets: targets, Candidates: candidates}
	var b strings.Builder
	for i, t := range targets {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(t.Address)
	}
	res.Headers[HeaderEncoderHostsPorts] = b.String()
	return true, ""
}

// sameHashItem returns an earlier item with the same known content hash.
func sameHashItem(req *Request, i int) int {
	imgs := req.Tokens.Images
	if i >= len(imgs) || imgs[i].Hash == 0 {
		return -1
	}
	for j := 0; j < i; j++ {
		if imgs[j].Hash == imgs[i].Hash {
			return j
		}
	}
	return -1
}

func (d *DisaggProfileHandler) prefillStage(ctx context.Context, req *Request, run ProfileRunner, res *Result, decode *Endpoint) (bool, string) {
	name := d.p.Profiles.Prefill
	if name == "" || !run.Has(name) {
		return false, ""
	}
	ok, reason := decide(ctx, d.prefillDecider, req, decode, ReasonInputTooShort)
	if !ok {
		return false, reason
	}
	pr, err := run.Run(ctx, name, req)
	if err != nil {
		if req.Debug() {
			req.Annotate(name, d.TypedName().Name, err.Error())
		}
		if HTTPStatus(err) == http.StatusServiceUnavailable {
			return false, ReasonNoPrefillEndpoint
		}
		return false, ReasonError
	}
	// A pod in both pools (role both, prefill-decode) may be picked by
	// both profiles: prefilling "remotely" on the decode pod itself only
	// adds a KV round trip, so take the next prefill candidate, or none.
	if decode != nil && pr.Target() == decode {
		rest := make([]*Endpoint, 0, len(pr.Targets))
		for _, t := range pr.Targets {
			if t != decode {
				rest = append(rest, t)
			}
		}
		if len(rest) == 0 {
			if req.Debug() {
				req.Annotate(name, d.TypedName().Name, "prefill pick is the decode endpoint itself; decoding with local prefill")
			}
			return false, ReasonNoPrefillEndpoint
		}
		pr = &ProfileResult{Profile: pr.Profile, Targets: rest, Candidates: pr.Candidates}
	}
	res.Profiles[name] = pr
	res.Headers[HeaderPrefillerHostPort] = pr.Target().Address
	return true, ""
}
