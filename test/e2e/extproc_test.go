package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/extproc"
	"github.com/spillway-llm/spillway/kvtransfer"
	"github.com/spillway-llm/spillway/test/sim"
)

// startExtProc serves spillway's ext_proc server for the picker and dials
// it the way Envoy does (plaintext HTTP/2, large flow-control windows).
func startExtProc(t *testing.T, p *picker) extprocv3.ExternalProcessorClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- extproc.Serve(ctx, extproc.NewServer(p.Director, quiet), extproc.ServeOptions{Listener: ln, Ready: p.Store.Synced})
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(256<<20), grpc.WithInitialConnWindowSize(256<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("extproc.Serve: %v", err)
		}
	})
	return extprocv3.NewExternalProcessorClient(conn)
}

// envoy plays Envoy's part of one HTTP request: the ext_proc exchange for
// the request, the upstream call to the ORIGINAL_DST the picker chose with
// the header mutations applied, and the response streamed through
// ext_proc. It returns the routing headers and the response body.
type envoy struct {
	t  *testing.T
	s  extprocv3.ExternalProcessor_ProcessClient
	hc *http.Client
}

func hv(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

func (e *envoy) send(m *extprocv3.ProcessingRequest) {
	e.t.Helper()
	if err := e.s.Send(m); err != nil {
		e.t.Fatalf("ext_proc send: %v", err)
	}
}

func (e *envoy) recv() *extprocv3.ProcessingResponse {
	e.t.Helper()
	m, err := e.s.Recv()
	if err != nil {
		e.t.Fatalf("ext_proc recv: %v", err)
	}
	return m
}

func (e *envoy) do(path, body string, chunk int) (routing map[string]string, status int, respHdr http.Header, out string) {
	t := e.t
	t.Helper()
	e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: hv(":method", "POST", ":path", path, ":authority", "gw", ":scheme", "http", "content-type", "application/json", "x-request-id", "envoy-1",
			// A client-forged prefiller must not survive.
			director.HeaderPrefiller, "169.254.169.254:80")}}})
	for i := 0; i < len(body); i += chunk {
		end := min(i+chunk, len(body))
		e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body[i:end]), EndOfStream: end == len(body)}}})
	}
	first := e.recv()
	if im := first.GetImmediateResponse(); im != nil {
		t.Fatalf("picker answered immediately: %v", im)
	}
	hr := first.GetRequestHeaders()
	if hr == nil {
		t.Fatalf("first answer %T, want request headers", first.Response)
	}
	routing = map[string]string{}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		routing[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	removed := map[string]bool{}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetRemoveHeaders() {
		removed[h] = true
	}
	if _, set := routing[director.HeaderPrefiller]; !set && !removed[director.HeaderPrefiller] {
		t.Fatalf("the forged %s is neither replaced nor removed", director.HeaderPrefiller)
	}
	lb := first.GetDynamicMetadata().GetFields()[director.MetadataLB].GetStructValue().GetFields()[director.HeaderDestination].GetStringValue()
	if lb != routing[director.HeaderDestination] {
		t.Fatalf("envoy.lb metadata %q != destination header %q", lb, routing[director.HeaderDestination])
	}
	var fwd strings.Builder
	for eos := false; !eos; {
		br := e.recv().GetRequestBody()
		if br == nil {
			t.Fatal("want the request body streamed back")
		}
		sr := br.GetResponse().GetBodyMutation().GetStreamedResponse()
		fwd.Write(sr.GetBody())
		eos = sr.GetEndOfStream()
	}

	// ORIGINAL_DST with use_http_header: the first address of the header.
	dst := strings.Split(routing[director.HeaderDestination], ",")[0]
	req, err := http.NewRequest(http.MethodPost, "http://"+dst+path, strings.NewReader(fwd.String()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-request-id", "envoy-1")
	for k, v := range routing {
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("upstream %s: %v", dst, err)
	}
	defer resp.Body.Close()
	kv := []string{":status", fmt.Sprint(resp.StatusCode)}
	for k := range resp.Header {
		kv = append(kv, strings.ToLower(k), resp.Header.Get(k))
	}
	served, _ := structpb.NewStruct(map[string]any{director.HeaderServed: dst})
	e.send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hv(kv...)}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{director.MetadataLB: served}},
	})
	if e.recv().GetResponseHeaders() == nil {
		t.Fatal("want a response headers answer")
	}
	// Relay the upstream body as it arrives, then the end of stream.
	var echoed strings.Builder
	buf := make([]byte, 512)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: append([]byte(nil), buf[:n]...)}}})
			echoed.Write(e.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			t.Fatalf("reading upstream: %v", rerr)
		}
	}
	e.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true}}})
	if !e.recv().GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
		t.Fatal("end of stream not echoed")
	}
	if err := e.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if m, err := e.s.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the response: %v %v, want the stream to end", m, err)
	}
	return routing, resp.StatusCode, resp.Header, echoed.String()
}

// TestExtProcEnvoyStyleAgainstSimulators: a gRPC client drives spillway's
// ext_proc server the way Envoy does, with the shipped P/D config over the
// simulator fleet, then calls the endpoint it was told to: the destination
// is a decode endpoint (its sidecar), x-prefiller-host-port a prefill
// endpoint, the sidecar carries the handoff out, the streamed response
// passes through ext_proc unchanged and releases the bookings.
func TestExtProcEnvoyStyleAgainstSimulators(t *testing.T) {
	fl := startDisagg(t, sim.FleetConfig{Prefill: 2, Decode: 2}, kvtransfer.Options{})
	p := startPicker(t, readConfig(t, "../bench/configs/pd-matched.yaml"), fl.specs, 0)
	p.waitScraped(t)
	ep := startExtProc(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s, err := ep.Process(ctx)
	if err != nil {
		t.Fatalf("opening the ext_proc stream: %v", err)
	}
	e := &envoy{t: t, s: s, hc: client}
	body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}],"max_tokens":5}`, model, words("envoy", 60))
	routing, status, hdr, out := e.do("/v1/chat/completions", body, 37)
	if status != 200 {
		t.Fatalf("upstream status %d: %s", status, out)
	}
	dst := strings.Split(routing[director.HeaderDestination], ",")
	for _, d := range dst {
		if fl.sidecar[d] == nil {
			t.Errorf("destination %q is not a decode endpoint of the fleet", d)
		}
	}
	pre := routing[director.HeaderPrefiller]
	var isPrefill bool
	for _, e := range fl.ByRole(sim.RolePrefill) {
		isPrefill = isPrefill || e.Address == pre
	}
	if !isPrefill {
		t.Fatalf("%s = %q, not a prefill endpoint of the fleet", director.HeaderPrefiller, pre)
	}
	if got := hdr.Get(kvtransfer.HeaderPrefill); got != kvtransfer.PrefillRemote {
		t.Fatalf("sidecar %s = %q, want remote", kvtransfer.HeaderPrefill, got)
	}
	if _, u := parseSSE(t, []byte(out)); u.PromptTokens != 62 || u.CompletionTokens != 5 {
		t.Errorf("usage %+v", u)
	}
	p.waitUnloaded(t)
}
