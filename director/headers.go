package director

// Header names shared by the front doors (protocols.md §1–§2).
const (
	// HeaderDestination carries the chosen decode endpoint(s): "ip:port[,ip:port...]",
	// primary first, the rest fallbacks in order.
	HeaderDestination = "x-gateway-destination-endpoint"
	// HeaderServed is the envoy.lb metadata key naming the endpoint that really served.
	HeaderServed = "x-gateway-destination-endpoint-served"
	// HeaderSubset is the subset-hint key in the envoy.lb.subset_hint namespace.
	HeaderSubset = "x-gateway-destination-endpoint-subset"
	// HeaderPrefiller names the chosen prefill endpoint (P/D).
	HeaderPrefiller = "x-prefiller-host-port"
	// HeaderEncoders names the chosen encoder endpoints (E-P-D).
	HeaderEncoders = "x-encoder-hosts-ports"
	// HeaderPrefillDoneMs is set by the decode sidecar on the response when a
	// remote prefill leg completed; its presence marks PrefillDone.
	HeaderPrefillDoneMs = "x-spillway-prefill-done-ms"
	// HeaderDebug on a request ("1" or "true") turns on the decision trace.
	HeaderDebug = "x-spillway-debug"
	// HeaderDecision is the response header that carries the decision trace.
	HeaderDecision = "x-spillway-decision"
	// HeaderRequestID is the request id header.
	HeaderRequestID = "x-request-id"
)

// MetadataLB is the dynamic-metadata namespace Envoy's load balancer reads;
// MetadataSubsetHint the filter-metadata namespace of the subset hint.
const (
	MetadataLB         = "envoy.lb"
	MetadataSubsetHint = "envoy.lb.subset_hint"
)

// RoutingHeaders are set only by the picker. A client must never be able to
// send them (the sidecar would dial whatever they name), so the front doors
// strip them from every inbound request.
var RoutingHeaders = []string{HeaderDestination, HeaderPrefiller, HeaderEncoders}

// IsRoutingHeader reports whether a lower-case header name is picker-owned.
func IsRoutingHeader(name string) bool {
	for _, h := range RoutingHeaders {
		if h == name {
			return true
		}
	}
	return false
}
