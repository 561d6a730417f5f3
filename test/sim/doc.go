// Package sim is spillway's simulated vLLM fleet: an engine model faithful
// enough that a better routing decision shows up as better TTFT and
// throughput for the same reasons it would on real vLLM (chunked prefill,
// decode batching, a finite prefix-cached KV store, the P/D and encoder
// roles), run either in virtual time (a discrete-event loop, in-process, for
// benchmarks) or on the wall clock behind real HTTP and ZMQ (for end-to-end
// tests). One Engine implementation serves both modes; the clock (the
// driver) is the only difference. See docs/sim.md.
//
// # Engine model
//
// Each step is composed like vLLM v1's scheduler: running requests first
// (decodes take one token, unfinished prefills their next chunk), then
// waiting requests FCFS, all within MaxNumBatchedTokens (B) tokens and
// MaxNumSeqs sequences. A new request's prefix-cache lookup happens when it
// is first scheduled; vLLM never hits the last prompt token, so at most
// (len−1)/16 blocks hit and an identical 8192-token prompt recomputes 16
// tokens. The step that completes a prompt samples its first token (TTFT);
// each later step yields one token; a request generates exactly MaxTokens
// tokens. Step time (Profile.StepTime):
//
//	T = StepBase + A·Σn_c + A·AttnRatio·Σ n_c·(ctx_c + n_c/2) + DecodePerSeq·d + DecodePerCtxToken·Σctx_d
//
// with A chosen so that a lone B-token chunk at zero context costs exactly
// ChunkTime (0.40 s for qwen3-32b-h100, the seed's T(8192)).
//
// KV: capacity NumGPUBlocks blocks of 16 tokens. Full prompt blocks enter a
// prefix cache keyed by chained block hashes as their chunk completes;
// full output blocks join it at completion when the request names its output
// (Request.OutputTokens), else they are freed. Unreferenced cached
// blocks are evicted LRU (tail first). A running request that cannot grow
// preempts the most recently admitted running request (recompute: it
// re-queues at the front and re-prefills prompt + generated tokens).
//
// # Virtual time
//
//	f := sim.NewVirtualFleet(time.Time{}, []sim.EndpointSpec{{Name: "p0", Role: sim.RoleBoth}, ...})
//	f.At(t, func() {                       // an arrival at virtual time t
//	    e := pick(f.Endpoints)             // e.g. the real spillway picker, fed e.Snapshot()
//	    e.Submit(&sim.Request{Prompt: ids, MaxTokens: 800,
//	        OnFirstToken: func(r *sim.Request, at time.Time) {...},
//	        OnComplete:   func(r *sim.Request, res sim.Result) {...}})
//	})
//	f.Run()                                // or f.Step() / f.RunUntil(t)
//
// f.Now() is the virtual clock; Engine.Snapshot() the live metrics (waiting,
// running, KV usage, prefix counters); VirtualFleet.SubmitPD runs a prefill
// leg then a decode leg that pays KV bytes ÷ bandwidth; an encode-role
// engine's Submit runs the vision encoder over the request's (image) tokens.
// Engine.SetEventSink delivers KV events in-process. Decode-only stretches
// are macro-stepped (up to 16 identical steps planned at once and truncated
// exactly at the first step boundary after any arrival), which is what makes
// ≥ 20,000 code-generation requests per wall second possible.
//
// # Real HTTP
//
// NewServer (or StartFleet for a loopback fleet with random ports) serves
// the OpenAI APIs, /tokenize, /v1/models, /health and /metrics with vLLM's
// metric names, kv_transfer_params (prefill and decode roles, with a real
// HTTP pull of the blocks from the prefill server: POST /internal/kv/pull),
// ec_transfer_params (encode role), fault injection and KV events over ZMQ
// (KVPublisher). Time runs at TimeScale simulated seconds per wall second;
// every response carries simulated timings in a non-standard "sim" object
// (ttft_s, e2e_s, arrival_s) and x-sim-ttft-seconds for non-stream replies.
//
// Tokenizer (TokenizeText, TokenizeMessages): one token per
// whitespace-separated word, id = FNV-1a-64(word) mod 151936; a chat message
// adds RoleToken(role) before its content and the prompt ends with
// RoleToken("assistant"); each image (image_url / input_image) is
// Profile.ImageTokens tokens derived from its URL (AppendImage).
package sim
