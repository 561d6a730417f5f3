package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// fdEngine is an engine stand-in: /metrics in vLLM's format and a chat
// endpoint answering with usage.
func fdEngine(t *testing.T) (*httptest.Server, string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			io.WriteString(w, "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.25\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("endpoints:\n- name: decode-0\n  address: %s\n  labels: {llm-d.ai/role: decode}\n", addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, file
}

func fdFreePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// fdRun runs the CLI with args until the test ends; an early exit (bad
// flags, port taken) shows as the waits timing out and the error below.
func fdRun(t *testing.T, args ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(io.Discard)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("spillway %s: %v", args[0], err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("spillway %s did not stop", args[0])
		}
	})
}

func fdGet(t *testing.T, url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// fdWait polls cond (bounded) and fails with what when it never holds.
func fdWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeCommandEndToEnd(t *testing.T) {
	engine, endpoints := fdEngine(t)
	grpcPort, healthPort, metricsPort := fdFreePort(t), fdFreePort(t), fdFreePort(t)
	fdRun(t, "serve", "--endpoints", endpoints, "--bind-address", "127.0.0.1",
		"--grpc-port", fmt.Sprint(grpcPort), "--grpc-health-port", fmt.Sprint(healthPort), "--metrics-port", fmt.Sprint(metricsPort))

	hconn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", healthPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hconn.Close()
	hc := healthpb.NewHealthClient(hconn)
	fdWait(t, "readiness SERVING", func() bool {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})

	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hv := func(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }
	send := func(m *extprocv3.ProcessingRequest) {
		if err := s.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":method", "POST"), hv(":path", "/v1/chat/completions")}}}}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
		Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), EndOfStream: true}}})
	r, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimPrefix(engine.URL, "http://")
	md := r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	var hdr string
	for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			hdr = string(h.GetHeader().GetRawValue())
		}
	}
	if hdr != want || md != want {
		t.Fatalf("destination header %q, metadata %q, want %q", hdr, md, want)
	}
	if _, err := s.Recv(); err != nil { // the body streamed back
		t.Fatal(err)
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv(":status", "200"), hv("content-type", "application/json")}}}}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
		Body: []byte(`{"usage":{"prompt_tokens":3,"completion_tokens":1}}`), EndOfStream: true}}})
	for range 2 {
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	s.CloseSend()

	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)
	fdWait(t, "spillway_requests_total on /metrics", func() bool {
		_, body := fdGet(t, metricsURL)
		return strings.Contains(body, `spillway_requests_total{code="200"} 1`) && strings.Contains(body, `spillway_decisions_total{endpoint="decode-0",profile="decode"} 1`)
	})
	if code, _ := fdGet(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", metricsPort)); code != 200 {
		t.Errorf("/readyz %d", code)
	}
}

func TestGatewayCommandEndToEnd(t *testing.T) {
	_, endpoints := fdEngine(t)
	listen := fmt.Sprintf("127.0.0.1:%d", fdFreePort(t))
	fdRun(t, "gateway", "--endpoints", endpoints, "--listen", listen, "--bind-address", "127.0.0.1", "--metrics-port", fmt.Sprint(fdFreePort(t)))
	var body string
	fdWait(t, "the gateway to answer 200", func() bool {
		resp, err := http.Post("http://"+listen+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	})
	if !strings.Contains(body, `"prompt_tokens":3`) {
		t.Fatalf("gateway answered %q", body)
	}
}

func TestServeCommandRejectsMissingEndpoints(t *testing.T) {
	root := newRootCmd()
	root.SetArgs([]string{"serve", "--metrics-port", "0"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--endpoints") {
		t.Fatalf("got %v, want an error naming --endpoints", err)
	}
}
