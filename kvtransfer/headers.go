// Package kvtransfer is the KV handoff of disaggregated serving: the routing
// header contract between the picker and the decode pod, and the decode
// pod's sidecar, which runs the encoder legs, the remote prefill leg and the
// local decode leg of each request with vLLM's NixlConnector parameters
// (kv_transfer_params, ec_transfer_params).
package kvtransfer

// Header contract. The picker sets the request headers; the sidecar strips
// them before forwarding anything and sets the response headers.
const (
	// HeaderDestination is the decode endpoint(s) the gateway routed to.
	HeaderDestination = "x-gateway-destination-endpoint"
	// HeaderPrefiller names the prefill endpoint, "host:port". Absent: the
	// decoder prefills locally.
	HeaderPrefiller = "x-prefiller-host-port"
	// HeaderEncoders lists encoders, "host:port,host:port"; multimodal item
	// i goes to entry i mod len(list) (the picker sends one per item).
	HeaderEncoders = "x-encoder-hosts-ports"
	// HeaderRequestID is shared by the prefill and decode legs.
	HeaderRequestID = "x-request-id"

	// HeaderPrefillDoneMs (response) is how long the prefill leg took, in
	// milliseconds, retries included; present whenever a prefill leg ran,
	// even if it failed, so that the picker releases the prefill
	// endpoint's tokens.
	HeaderPrefillDoneMs = "x-spillway-prefill-done-ms"
	// HeaderPrefill (response) says how the prompt was prefilled when a
	// prefiller was named: PrefillRemote or PrefillFallbackLocal.
	HeaderPrefill = "x-spillway-prefill"
	// HeaderError (response) carries the typed reason of a sidecar error.
	HeaderError = "x-spillway-error"
)

// Values of HeaderPrefill.
const (
	PrefillRemote        = "remote"
	PrefillFallbackLocal = "fallback-local"
)

// Typed error reasons (HeaderError, and "reason" in the JSON error body).
const (
	ReasonForbiddenHost           = "forbidden_host"
	ReasonBadRequest              = "bad_request"
	ReasonDecodeLegFailed         = "decode_leg_failed"
	ReasonDecodeStreamInterrupted = "decode_stream_interrupted"
)

// routingHeaders are never forwarded to any leg.
var routingHeaders = map[string]bool{HeaderDestination: true, HeaderPrefiller: true, HeaderEncoders: true}

// hopHeaders are connection-level and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}
