package extproc

import (
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/spillway-llm/spillway/director"
)

// headerMap flattens Envoy's header map to lower-case names; repeated
// headers are joined with ",". Envoy sends values in raw_value.
func headerMap(hm *corev3.HeaderMap) map[string]string {
	if hm == nil {
		return map[string]string{}
	}
	out := make(map[string]string, len(hm.Headers))
	for _, h := range hm.Headers {
		k := strings.ToLower(h.Key)
		v := h.Value
		if len(h.RawValue) > 0 {
			v = string(h.RawValue)
		}
		if prev, ok := out[k]; ok {
			v = prev + "," + v
		}
		out[k] = v
	}
	return out
}

func setHeader(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// routingMutation sets the destination and routing headers and removes
// every picker-owned header the client sent that the decision did not set.
func routingMutation(x *director.Exchange, contentLength int) *extprocv3.HeaderMutation {
	rh := x.RoutingHeaders()
	m := &extprocv3.HeaderMutation{SetHeaders: make([]*corev3.HeaderValueOption, 0, 2+len(rh))}
	m.SetHeaders = append(m.SetHeaders, setHeader(director.HeaderDestination, x.Destination()))
	for k, v := range rh {
		m.SetHeaders = append(m.SetHeaders, setHeader(k, v))
	}
	for _, h := range director.RoutingHeaders {
		if _, set := rh[h]; !set && h != director.HeaderDestination {
			m.RemoveHeaders = append(m.RemoveHeaders, h)
		}
	}
	if contentLength >= 0 {
		m.SetHeaders = append(m.SetHeaders, setHeader("content-length", strconv.Itoa(contentLength)))
	}
	return m
}

// lbMetadata is {"envoy.lb": {"x-gateway-destination-endpoint": dest}}.
func lbMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		director.MetadataLB: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			director.HeaderDestination: structpb.NewStringValue(dest),
		}}),
	}}
}

// subsetHint reads envoy.lb.subset_hint / x-gateway-destination-endpoint-subset:
// a list of "ip:port" (a comma-separated string is accepted too). nil when
// absent; an empty non-nil slice when present but empty.
func subsetHint(md *corev3.Metadata) []string {
	if md == nil {
		return nil
	}
	ns := md.FilterMetadata[director.MetadataSubsetHint]
	if ns == nil {
		return nil
	}
	v, ok := ns.Fields[director.HeaderSubset]
	if !ok {
		return nil
	}
	out := []string{}
	add := func(s string) {
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
	}
	switch k := v.Kind.(type) {
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			add(e.GetStringValue())
		}
	case *structpb.Value_StringValue:
		add(k.StringValue)
	}
	return out
}

// servedEndpoint reads envoy.lb / x-gateway-destination-endpoint-served from
// the response's metadata context.
func servedEndpoint(md *corev3.Metadata) string {
	if md == nil {
		return ""
	}
	ns := md.FilterMetadata[director.MetadataLB]
	if ns == nil {
		return ""
	}
	return ns.Fields[director.HeaderServed].GetStringValue()
}
