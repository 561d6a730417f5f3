package kvtransfer

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/spillway-llm/spillway/decode"
	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/gateway"
	"github.com/spillway-llm/spillway/profiles"
)

const e2eConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: prefill-filter
- type: active-request-scorer
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters:
    deciders: {prefill: always-disagg-pd-decider}
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: active-request-scorer}]
- name: prefill
  plugins: [{pluginRef: prefill-filter}]
`

// The whole P/D path over real HTTP: client → spillway gateway (picker) →
// decode pod sidecar → fake vLLM prefiller and decoder.
func TestEndToEndGatewaySidecar(t *testing.T) {
	r := newRig(t, rigOpts{})
	eps := profiles.EndpointList{
		profiles.NewEndpoint(0, "decode-0", strings.TrimPrefix(r.front.URL, "http://"), map[string]string{profiles.RoleLabel: "decode"}),
		profiles.NewEndpoint(1, "prefill-0", r.prefill.addr(), map[string]string{profiles.RoleLabel: "prefill"}),
	}
	s, err := profiles.LoadConfigBytes("e2e.yaml", []byte(e2eConfig), profiles.Options{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gw := httptest.NewServer(gateway.New(director.New(s, director.Options{}), gateway.Options{DialTimeout: 2 * time.Second}))
	defer gw.Close()
	ars, _ := s.Plugin("active-request-scorer")

	for _, stream := range []bool{false, true} {
		body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":20}`
		if stream {
			body = `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}`
		}
		before := len(r.prefill.got())
		gwRig := &rig{front: gw}
		// A client-sent routing header is dropped by the gateway; the
		// picker's own choice is what the sidecar sees.
		resp, out := gwRig.send(t, context.Background(), PathChatCompletions, body,
			map[string]string{HeaderPrefiller: "169.254.169.254:80", HeaderRequestID: "e2e"})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		if resp.Header.Get(HeaderPrefill) != PrefillRemote || resp.Header.Get(HeaderPrefillDoneMs) == "" {
			t.Errorf("response headers %v", resp.Header)
		}
		pl := r.prefill.got()
		if len(pl) != before+1 {
			t.Fatalf("prefill legs %d, want %d", len(pl), before+1)
		}
		c := apiCase{path: PathChatCompletions, body: body}
		jsonEq(t, "prefill leg", pl[len(pl)-1].Body, wantPrefill(t, c))
		dl := r.decoder.got()
		wantDecode := mustJSON(t, body)
		wantDecode["kv_transfer_params"] = prefillKV
		jsonEq(t, "decode leg", dl[len(dl)-1].Body, wantDecode)
		if dl[len(dl)-1].Header.Get(HeaderRequestID) != "e2e" || pl[len(pl)-1].Header.Get(HeaderRequestID) != "e2e" {
			t.Error("x-request-id not carried through gateway and sidecar")
		}
		checkCached(t, PathChatCompletions, stream, out)
		// The picker released the decode booking at the end of the stream.
		deadline := time.Now().Add(5 * time.Second)
		for ars.(*decode.ActiveRequestScorer).InFlight(eps[0]) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("decode endpoint still booked after the response ended")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
