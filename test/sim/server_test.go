package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func words(seed, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "w%d_%d ", seed, i)
	}
	return b.String()
}

func post(t *testing.T, url string, body any, hdr ...string) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v: %s", url, err, raw)
	}
	return resp.StatusCode, m
}

func simTTFT(m map[string]any) float64 { return m["sim"].(map[string]any)["ttft_s"].(float64) }

func TestHTTPBasics(t *testing.T) {
	s, err := NewServer(ServerConfig{Model: "m", TimeScale: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// tokenize: one token per word, chat template adds role tokens
	code, m := post(t, s.URL()+"/tokenize", map[string]any{"model": "m", "prompt": "a b c"})
	if code != 200 || m["count"].(float64) != 3 || len(m["tokens"].([]any)) != 3 {
		t.Fatalf("tokenize %d %v", code, m)
	}
	if uint32(m["tokens"].([]any)[0].(float64)) != WordToken("a") {
		t.Fatal("token id rule")
	}
	_, m = post(t, s.URL()+"/tokenize", map[string]any{"model": "m", "messages": []any{
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hi there"}, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x/a.png"}}}}}})
	if int(m["count"].(float64)) != 1+2+256+1 {
		t.Fatalf("chat tokenize count %v", m["count"])
	}
	prompt := words(1, 600)
	for _, kind := range []string{"chat", "completions", "responses"} {
		var body map[string]any
		var path string
		switch kind {
		case "chat":
			path, body = "/v1/chat/completions", map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": prompt}}, "max_tokens": 5}
		case "completions":
			path, body = "/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 5}
		default:
			path, body = "/v1/responses", map[string]any{"model": "m", "input": prompt, "max_output_tokens": 5}
		}
		code, m := post(t, s.URL()+path, body)
		if code != 200 {
			t.Fatalf("%s: %d %v", kind, code, m)
		}
		u := m["usage"].(map[string]any)
		if kind == "responses" {
			if u["output_tokens"].(float64) != 5 {
				t.Fatalf("%v", u)
			}
		} else if u["completion_tokens"].(float64) != 5 || u["prompt_tokens_details"] == nil {
			t.Fatalf("%s usage %v", kind, u)
		}
	}
	// chat twice: the second hits the cache (responses input == chat user msg)
	_, m = post(t, s.URL()+"/v1/chat/completions", map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": prompt}}, "max_tokens": 5})
	if c := m["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); c < 592 {
		t.Fatalf("cached_tokens %v", c)
	}
	// streaming chat with usage
	b, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "stream_options": map[string]any{"include_usage": true},
		"messages": []any{map[string]any{"role": "user", "content": words(2, 100)}}, "max_tokens": 4})
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var datas []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			datas = append(datas, l)
		}
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || len(datas) != 4+1+1+1 || datas[len(datas)-1] != "[DONE]" {
		t.Fatalf("stream %q", datas)
	}
	var last map[string]any
	json.Unmarshal([]byte(datas[len(datas)-2]), &last)
	if last["usage"].(map[string]any)["completion_tokens"].(float64) != 4 {
		t.Fatalf("usage chunk %v", last)
	}
	// metrics
	resp, _ = http.Get(s.URL() + "/metrics")
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`vllm:num_requests_waiting{engine="0",model_name="m"} 0`, "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
		`vllm:cache_config_info{block_size="16",engine="0",model_name="m",num_gpu_blocks="19000"} 1`, "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:time_to_first_token_seconds_bucket"} {
		if !strings.Contains(string(mb), want) {
			t.Fatalf("metrics missing %q:\n%s", want, mb)
		}
	}
	if r, _ := http.Get(s.URL() + "/health"); r.StatusCode != 200 {
		t.Fatal("health")
	}
	if r, _ := http.Get(s.URL() + "/v1/models"); r.StatusCode != 200 {
		t.Fatal("models")
	}
}

// P/D through real HTTP: the decode leg's TTFT is transfer time + one step.
func TestHTTPPDRoundTrip(t *testing.T) {
	ctx := context.Background()
	f, err := StartFleet(ctx, FleetConfig{Model: "m", TimeScale: 10, Prefill: 2, Decode: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p1, p2, d := f.ByRole(RolePrefill)[0], f.ByRole(RolePrefill)[1], f.ByRole(RoleDecode)[0]
	prompt := words(3, 8000)
	body := map[string]any{"model": "m", "prompt": prompt, "max_tokens": 1, "stream": false,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}}
	code, pm := post(t, p1.URL()+"/v1/completions", body, "x-request-id", "rq1")
	if code != 200 {
		t.Fatalf("prefill %d %v", code, pm)
	}
	kv := pm["kv_transfer_params"].(map[string]any)
	for _, k := range []string{"remote_engine_id", "remote_block_ids", "remote_request_id", "remote_host", "remote_port", "tp_size"} {
		if kv[k] == nil {
			t.Fatalf("kv_transfer_params lacks %s: %v", k, kv)
		}
	}
	if kv["do_remote_prefill"] != true || len(kv["remote_block_ids"].([]any)) != 500 || kv["remote_engine_id"] != p1.Name {
		t.Fatalf("%v", kv)
	}
	if p1.Engine.Snapshot().Held != 1 {
		t.Fatal("prefill should hold the KV until the pull")
	}
	// wrong pairing: decode told the blocks live on p2 — the pull fails
	bad := map[string]any{}
	for k, v := range kv {
		bad[k] = v
	}
	bad["remote_port"] = float64(mustPort(p2.Address))
	code, _ = post(t, d.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 3, "kv_transfer_params": bad})
	if code != 502 {
		t.Fatalf("wrong pairing: %d, want 502", code)
	}
	code, dm := post(t, d.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 3, "kv_transfer_params": kv}, "x-request-id", "rq1")
	if code != 200 {
		t.Fatalf("decode %d %v", code, dm)
	}
	prof := MustProfile(DefaultProfileName)
	want := (prof.TransferTime(8000) + prof.StepTime([][2]int{{1, 7999}}, 0, 0)).Seconds()
	if got := simTTFT(dm); math.Abs(got-want) > 0.01*want+0.002 {
		t.Fatalf("decode TTFT %v, want transfer+step %v", got, want)
	}
	if p1.Engine.Snapshot().Held != 0 {
		t.Fatal("pull should release the prefill KV")
	}
	// the same params again: already pulled
	code, _ = post(t, d.URL()+"/v1/completions", map[string]any{"model": "m", "prompt": prompt, "max_tokens": 3, "kv_transfer_params": kv})
	if code != 502 {
		t.Fatalf("second pull %d", code)
	}
}

func mustPort(addr string) int {
	var p int
	fmt.Sscanf(addr[strings.LastIndex(addr, ":")+1:], "%d", &p)
	return p
}

// The same trace in real HTTP (5× time scale) and in virtual time gives
// TTFTs within 5%.
// The real engine steps on the wall clock, so a loaded machine can delay a
// step; the trace is tried up to three times and must agree once.
func TestRealVsVirtualTrace(t *testing.T) {
	var errs []string
	for attempt := 1; attempt <= 3; attempt++ {
		if errs = realVsVirtualOnce(t); len(errs) == 0 {
			return
		}
		t.Logf("attempt %d: %v", attempt, errs)
	}
	t.Error(errs)
}

func realVsVirtualOnce(t *testing.T) (errs []string) {
	type item struct {
		at     time.Duration
		prompt string
		out    int
	}
	shared := words(9, 3000)
	trace := []item{
		{0, words(10, 6000), 20}, {150 * time.Millisecond, words(11, 3000), 20}, {380 * time.Millisecond, shared + words(12, 500), 10},
		{1500 * time.Millisecond, shared + words(13, 700), 10}, {1600 * time.Millisecond, words(14, 9000), 5}, {3500 * time.Millisecond, words(15, 2000), 30},
	}
	const scale = 5
	s, err := NewServer(ServerConfig{Model: "m", TimeScale: scale})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mu sync.Mutex
	real := make([]float64, len(trace))
	arrived := make([]time.Duration, len(trace)) // HTTP adds arrival jitter: replay the observed arrivals
	var wg sync.WaitGroup
	start := time.Now()
	for i, it := range trace {
		wg.Add(1)
		body, _ := json.Marshal(map[string]any{"model": "m", "prompt": it.prompt, "max_tokens": it.out})
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(it.at / scale)))
			resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				mu.Lock()
				errs = append(errs, err.Error())
				mu.Unlock()
				return
			}
			defer resp.Body.Close()
			var m map[string]any
			json.NewDecoder(resp.Body).Decode(&m)
			real[i] = simTTFT(m)
			arrived[i] = time.Duration(m["sim"].(map[string]any)["arrival_s"].(float64) * 1e9)
		}()
	}
	wg.Wait()
	f := NewVirtualFleet(time.Time{}, []EndpointSpec{{}})
	virt := make([]float64, len(trace))
	for i, it := range trace {
		f.At(f.Epoch().Add(arrived[i]-arrived[0]), func() {
			f.Endpoints[0].Submit(&Request{Prompt: TokenizeText(it.prompt), MaxTokens: it.out,
				OnComplete: func(_ *Request, r Result) { virt[i] = r.TTFT().Seconds() }})
		})
	}
	f.Run()
	for i := range trace {
		t.Logf("req %d at %v: real %.4fs virtual %.4fs", i, arrived[i]-arrived[0], real[i], virt[i])
		if math.Abs(real[i]-virt[i]) > 0.05*virt[i] {
			errs = append(errs, fmt.Sprintf("req %d: real %.4f vs virtual %.4f (>5%%)", i, real[i], virt[i]))
		}
	}
	return errs
}

func TestFaults(t *testing.T) {
	s, err := NewServer(ServerConfig{Model: "m", TimeScale: 100, Faults: Faults{FailRate: 1, FailStatus: 429}})
	if err != nil {
		t.Fatal(err)
	}
	code, _ := post(t, s.URL()+"/v1/completions", map[string]any{"prompt": "a b", "max_tokens": 1})
	s.Close()
	if code != 429 {
		t.Fatalf("fail rate: %d", code)
	}
	s, _ = NewServer(ServerConfig{Model: "m", TimeScale: 100, Faults: Faults{DieAfter: 1}})
	defer s.Close()
	if code, _ := post(t, s.URL()+"/v1/completions", map[string]any{"prompt": "a b", "max_tokens": 1}); code != 200 {
		t.Fatal(code)
	}
	b, _ := json.Marshal(map[string]any{"prompt": "a b", "max_tokens": 1})
	if _, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(b)); err == nil {
		t.Fatal("expected the dead server to drop the connection")
	}
}

func TestHTTPEncodeAndResponsesStream(t *testing.T) {
	f, err := StartFleet(context.Background(), FleetConfig{Model: "m", TimeScale: 50, Encode: 1, Both: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	enc, both := f.ByRole(RoleEncode)[0], f.ByRole(RoleBoth)[0]
	msg := []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "what is this"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://img/1.png"}}}}}
	code, m := post(t, enc.URL()+"/v1/chat/completions", map[string]any{"model": "m", "messages": msg, "max_tokens": 1})
	if code != 200 {
		t.Fatal(code, m)
	}
	ec := m["ec_transfer_params"].(map[string]any)[MMHash("http://img/1.png")].(map[string]any)
	p := MustProfile(DefaultProfileName)
	if ec["peer_port"].(float64) != float64(mustPort(enc.Address)) || ec["size_bytes"].(float64) != float64(int64(p.ImageTokens)*p.EncodeBytesPerTok) || ec["nixl_agent_metadata_b64"] == "" {
		t.Fatalf("%v", ec)
	}
	want := (p.StepBase + time.Duration(p.ImageTokens)*p.EncodePerToken).Seconds()
	if got := simTTFT(m); math.Abs(got-want) > 0.002 {
		t.Fatalf("encoder time %v want %v", got, want)
	}
	// the prefill/decode endpoint accepts the merged ec_transfer_params
	b, _ := json.Marshal(map[string]any{"model": "m", "input": msg, "max_output_tokens": 3, "stream": true,
		"ec_transfer_params": m["ec_transfer_params"]})
	resp, err := http.Post(both.URL()+"/v1/responses", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var last string
	for sc.Scan() {
		if e, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, e)
		}
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = d
		}
	}
	if strings.Join(events, ",") != "response.created,response.output_text.delta,response.output_text.delta,response.output_text.delta,response.completed" {
		t.Fatalf("events %v", events)
	}
	var done map[string]any
	json.Unmarshal([]byte(last), &done)
	u := done["response"].(map[string]any)["usage"].(map[string]any)
	if u["input_tokens"].(float64) != float64(1+3+p.ImageTokens+1) || u["output_tokens"].(float64) != 3 {
		t.Fatalf("usage %v", u)
	}
}

// A next chat turn quoting the reply hits the cache through the reply.
func TestHTTPMultiTurnHitsThroughReply(t *testing.T) {
	s, err := NewServer(ServerConfig{Model: "m", TimeScale: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	turn1 := []any{map[string]any{"role": "user", "content": words(5, 300)}}
	_, m := post(t, s.URL()+"/v1/chat/completions", map[string]any{"model": "m", "messages": turn1, "max_tokens": 100})
	reply := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	turn2 := append(turn1, map[string]any{"role": "assistant", "content": reply}, map[string]any{"role": "user", "content": words(6, 50)})
	_, m = post(t, s.URL()+"/v1/chat/completions", map[string]any{"model": "m", "messages": turn2, "max_tokens": 1})
	u := m["usage"].(map[string]any)
	cached := int(u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64))
	// prompt 1 = 1+300+1 tokens, +99 generated tokens with KV = 401 → 25 blocks
	if cached != 400 {
		t.Fatalf("cached %d of %v, want 400 (prompt + reply blocks)", cached, u["prompt_tokens"])
	}
}
