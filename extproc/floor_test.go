package extproc_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// echoProcessor is the floor the benchmark compares against: it buffers the
// body and streams it back like the real server but neither parses nor
// schedules, so the difference to BenchmarkExtProcRoundTrip is spillway's
// own processing.
type echoProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
}

func (echoProcessor) Process(s extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	for {
		m, err := s.Recv()
		if err != nil {
			return nil
		}
		var out []*extprocv3.ProcessingResponse
		switch v := m.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, v.RequestBody.GetBody()...)
			if v.RequestBody.GetEndOfStream() {
				out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{ClearRouteCache: true}}}})
				for len(body) > 0 {
					n := min(len(body), 62000)
					out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: streamedMut(body[:n], n == len(body))}}}})
					body = body[n:]
				}
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: streamedMut(v.ResponseBody.GetBody(), v.ResponseBody.GetEndOfStream())}}}})
		}
		for _, r := range out {
			if err := s.Send(r); err != nil {
				return nil
			}
		}
	}
}

func streamedMut(b []byte, eos bool) *extprocv3.BodyMutation {
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}
}

// BenchmarkExtProcTransportFloor is BenchmarkExtProcRoundTrip against
// echoProcessor: the cost of gRPC and protobuf alone on this machine.
func BenchmarkExtProcTransportFloor(b *testing.B) {
	for _, tokens := range []int{8000, 100000} {
		b.Run(fmt.Sprintf("tokens=%dk", tokens/1000), func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			gs := grpc.NewServer(grpc.InitialWindowSize(4<<20), grpc.InitialConnWindowSize(16<<20))
			extprocv3.RegisterExternalProcessorServer(gs, echoProcessor{})
			go gs.Serve(ln)
			defer gs.Stop()
			conn, err := grpc.NewClient(ln.Addr().String(), append(envoyWindows, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := extprocv3.NewExternalProcessorClient(conn)
			body := chatOfTokens(tokens)
			msgs := []*extprocv3.ProcessingRequest{reqHeaders("floor", false, nil)}
			for i := 0; i < len(body); i += envoyChunk {
				msgs = append(msgs, reqBody(body[i:min(i+envoyChunk, len(body))], i+envoyChunk >= len(body)))
			}
			rh := respHeaders(nil, false, ":status", "200")
			rb := respBody("data: [DONE]\n\n", true)
			var reqLat []time.Duration
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				sc, err := client.Process(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				s := &stream{t: b, s: sc}
				s.send(msgs...)
				r := s.recvRouting(true)
				reqLat = append(reqLat, time.Since(t0))
				if len(r.body) != len(body) {
					b.Fatalf("echo returned %d bytes", len(r.body))
				}
				s.send(rh)
				s.recv()
				s.send(rb)
				s.recv()
				_ = sc.CloseSend()
				_, _ = sc.Recv()
			}
			b.ReportMetric(pct(reqLat, 50), "req-p50-ms")
			b.ReportMetric(pct(reqLat, 99), "req-p99-ms")
		})
	}
}
