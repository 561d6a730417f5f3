package profiles

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// RoleFilter keeps endpoints whose llm-d.ai/role is in a fixed set. It backs
// decode-filter, prefill-filter and encode-filter.
type RoleFilter struct {
	Named
	roles []string
}

func init() {
	for typ, roles := range map[string][]string{
		"decode-filter":  DecodeRoles,
		"prefill-filter": PrefillRoles,
		"encode-filter":  EncodeRoles,
	} {
		Register(typ, func(name string, raw json.RawMessage, h Handle) (Plugin, error) {
			var p struct{}
			if err := DecodeParams(raw, &p); err != nil {
				return nil, err
			}
			return &RoleFilter{Named: NewNamed(typ, name), roles: roles}, nil
		})
	}
	Register("label-selector-filter", newLabelSelectorFilter)
}

// Filter implements Filter.
func (f *RoleFilter) Filter(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint) []*Endpoint {
	return filterFunc(eps, func(e *Endpoint) bool { return e.HasRole(f.roles...) })
}

// Describe implements Describer.
func (f *RoleFilter) Describe() []string {
	r := make([]string, len(f.roles))
	for i, v := range f.roles {
		if v == "" {
			v = "(unlabelled)"
		}
		r[i] = v
	}
	return []string{"accepts " + RoleLabel + " in: " + strings.Join(r, ", ")}
}

// filterFunc returns eps itself when everything passes, else a new slice.
func filterFunc(eps []*Endpoint, keep func(*Endpoint) bool) []*Endpoint {
	for i, e := range eps {
		if keep(e) {
			continue
		}
		out := make([]*Endpoint, i, len(eps)-1)
		copy(out, eps[:i])
		for _, e2 := range eps[i+1:] {
			if keep(e2) {
				out = append(out, e2)
			}
		}
		return out
	}
	return eps
}

// LabelRequirement is one matchExpressions entry, as in a Kubernetes label
// selector.
type LabelRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"` // In, NotIn, Exists, DoesNotExist
	Values   []string `json:"values,omitempty"`
}

type labelSelectorParams struct {
	MatchLabels      map[string]string  `json:"matchLabels,omitempty"`
	MatchExpressions []LabelRequirement `json:"matchExpressions,omitempty"`
}

// LabelSelectorFilter keeps endpoints whose labels match a selector.
type LabelSelectorFilter struct {
	Named
	p labelSelectorParams
}

func newLabelSelectorFilter(name string, raw json.RawMessage, h Handle) (Plugin, error) {
	var p labelSelectorParams
	if err := DecodeParams(raw, &p); err != nil {
		return nil, err
	}
	if len(p.MatchLabels) == 0 && len(p.MatchExpressions) == 0 {
		return nil, fmt.Errorf("matchLabels or matchExpressions is required")
	}
	for i, r := range p.MatchExpressions {
		if r.Key == "" {
			return nil, fmt.Errorf("matchExpressions[%d].key is required", i)
		}
		switch r.Operator {
		case "In", "NotIn":
			if len(r.Values) == 0 {
				return nil, fmt.Errorf("matchExpressions[%d]: operator %s needs values", i, r.Operator)
			}
		case "Exists", "DoesNotExist":
			if len(r.Values) != 0 {
				return nil, fmt.Errorf("matchExpressions[%d]: operator %s takes no values", i, r.Operator)
			}
		default:
			return nil, fmt.Errorf("matchExpressions[%d].operator %q (accepted: In, NotIn, Exists, DoesNotExist)", i, r.Operator)
		}
	}
	return &LabelSelectorFilter{Named: NewNamed("label-selector-filter", name), p: p}, nil
}

// Params implements Parameterized.
func (f *LabelSelectorFilter) Params() any { return f.p }

// Matches reports whether labels satisfy the selector.
func (f *LabelSelectorFilter) Matches(labels map[string]string) bool {
	for k, v := range f.p.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	for _, r := range f.p.MatchExpressions {
		v, ok := labels[r.Key]
		switch r.Operator {
		case "In":
			if !ok || !slices.Contains(r.Values, v) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(r.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		}
	}
	return true
}

// Filter implements Filter.
func (f *LabelSelectorFilter) Filter(_ context.Context, _ *CycleState, _ *Request, eps []*Endpoint) []*Endpoint {
	return filterFunc(eps, func(e *Endpoint) bool { return f.Matches(e.Labels) })
}
