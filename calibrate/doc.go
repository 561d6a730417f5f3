// Package calibrate measures an endpoint's peak prefill throughput, the one
// number the prefix-cache affinity filter's saturation release is derived
// from (τ = peakPrefillThroughput × maxTTFTPenaltyMs).
//
// The method is the seed's recipe: send prompts of exactly B tokens (B =
// the engine's max-num-batched-tokens, one full prefill chunk) made of
// random words so that no prefix is cached, one at a time, streaming with
// max_tokens 1; discard the warm-ups; peakPrefillThroughput = B / median
// TTFT. The prompt length is checked with the server's /tokenize endpoint
// when it has one, else with the usage the response reports.
//
// Results can be merged into a configuration matrix file
// (deploy/calibration/matrix.yaml) keyed by model, accelerator, engine,
// tensor parallelism and chunk size.
package calibrate
