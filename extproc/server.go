package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/profiles"
)

// MaxBodyChunk is the largest StreamedBodyResponse chunk sent back to Envoy
// (protocols.md §1: at most ~62 KB per message).
const MaxBodyChunk = 62000

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	d   *director.Director
	log *slog.Logger
}

// NewServer returns an ext_proc server running d. log may be nil.
func NewServer(d *director.Director, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{d: d, log: log}
}

// Process handles one HTTP request's stream of processing messages.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	st := &exchangeState{s: s}
	defer st.abandon()
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("receiving from envoy: %w", err)
		}
		out := st.handle(ctx, msg)
		if msg.ObservabilityMode {
			continue // Envoy does not wait for answers in observability mode
		}
		for _, r := range out {
			if err := stream.Send(r); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("sending to envoy: %w", err)
			}
		}
	}
}

// exchangeState is one stream's progress.
type exchangeState struct {
	s        *Server
	headers  map[string]string
	hint     []string
	body     []byte
	routed   bool // the request phase is answered (routed or rejected)
	x        *director.Exchange
	respDone bool
}

// abandon fails a request whose stream ended before its response did
// (client gone, upstream reset, Envoy timeout).
func (st *exchangeState) abandon() {
	if st.x != nil && !st.x.Done() {
		st.x.Fail(499, context.Canceled)
	}
}

func (st *exchangeState) handle(ctx context.Context, msg *extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	switch v := msg.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		st.headers = headerMap(v.RequestHeaders.GetHeaders())
		st.hint = subsetHint(msg.MetadataContext)
		// Size the buffer once when the length is known: long prompts
		// would otherwise be copied on every doubling.
		if cl, err := strconv.Atoi(st.headers["content-length"]); err == nil && cl > 0 && cl <= st.s.d.MaxBodyBytes() {
			st.body = make([]byte, 0, cl)
		}
		if v.RequestHeaders.GetEndOfStream() {
			return st.route(ctx, false, false)
		}
		return nil
	case *extprocv3.ProcessingRequest_RequestBody:
		if st.routed {
			// A duplicated end-of-stream (or a chunk after an immediate
			// response): the body is already complete; never append to it.
			return nil
		}
		chunk := v.RequestBody.GetBody()
		if len(st.body)+len(chunk) > st.s.d.MaxBodyBytes() {
			st.routed = true
			st.s.d.ObserveRejected(http.StatusRequestEntityTooLarge)
			return immediate(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes", st.s.d.MaxBodyBytes()))
		}
		st.body = append(st.body, chunk...)
		if v.RequestBody.GetEndOfStream() {
			return st.route(ctx, true, false)
		}
		return nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		var out []*extprocv3.ProcessingResponse
		if !st.routed {
			out = st.route(ctx, true, true)
			if st.x == nil {
				return out // rejected: the immediate response ends the stream
			}
		}
		return append(out, trailersResponse(true))
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(msg, v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.respDone {
			return nil // duplicated end of stream
		}
		b := v.ResponseBody
		if st.x != nil {
			st.x.ResponseBody(b.GetBody(), b.GetEndOfStream())
		}
		st.respDone = b.GetEndOfStream()
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: streamed(b.GetBody(), b.GetEndOfStream())}},
		}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if st.x != nil {
			st.x.ResponseBody(nil, true)
		}
		st.respDone = true
		return []*extprocv3.ProcessingResponse{trailersResponse(false)}
	default:
		return nil
	}
}

// route schedules the complete request and answers its headers (and body).
func (st *exchangeState) route(ctx context.Context, hasBody, trailers bool) []*extprocv3.ProcessingResponse {
	st.routed = true
	x, err := st.s.d.Route(ctx, director.Inbound{
		Method:     st.headers[":method"],
		Path:       st.headers[":path"],
		Headers:    st.headers,
		Body:       st.body,
		SubsetHint: st.hint,
	})
	if err != nil {
		code := profiles.HTTPStatus(err)
		if code >= 500 && code != http.StatusServiceUnavailable {
			st.s.log.Error("routing failed", "path", st.headers[":path"], "err", err)
		}
		return immediate(code, profiles.ClientMessage(err))
	}
	st.x = x
	body, rewritten := x.Body()
	cl := -1
	if rewritten {
		cl = len(body)
	}
	out := make([]*extprocv3.ProcessingResponse, 0, 2+len(body)/MaxBodyChunk)
	out = append(out, &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: routingMutation(x, cl)},
		}},
		DynamicMetadata: lbMetadata(x.Destination()),
	})
	if !hasBody {
		return out
	}
	// In FULL_DUPLEX_STREAMED mode Envoy forwards only what we stream back,
	// so the body always goes back, in order, in bounded chunks.
	for first := true; first || len(body) > 0; first = false {
		n := min(len(body), MaxBodyChunk)
		last := n == len(body)
		out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: streamed(body[:n], last && !trailers)}},
		}})
		body = body[n:]
	}
	return out
}

func (st *exchangeState) responseHeaders(msg *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) []*extprocv3.ProcessingResponse {
	common := &extprocv3.CommonResponse{}
	if st.x != nil {
		hm := headerMap(h.GetHeaders())
		code, _ := strconv.Atoi(hm[":status"])
		if served := servedEndpoint(msg.MetadataContext); served != "" {
			st.x.SetServed(served)
		}
		st.x.ResponseHeaders(code, func(k string) string { return hm[k] })
		if dbg := st.x.DebugHeader(); dbg != "" {
			common.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(director.HeaderDecision, dbg)}}
		}
		if h.GetEndOfStream() {
			st.x.ResponseBody(nil, true)
			st.respDone = true
		}
	}
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: common},
	}}}
}

func streamed(b []byte, eos bool) *extprocv3.BodyMutation {
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
		StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos},
	}}
}

func trailersResponse(request bool) *extprocv3.ProcessingResponse {
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
}

// immediate answers the client directly with an OpenAI-shaped JSON error.
func immediate(code int, message string) []*extprocv3.ProcessingResponse {
	return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
			Body:    director.ErrorBody(code, message),
			Details: message,
		},
	}}}
}
