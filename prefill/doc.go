// Package prefill holds spillway's prefill-pool plugins: the prefix indexes
// (approximate, from the router's own routing history, and precise, from
// vLLM KV-cache events), the in-flight load producer, the
// prefix-cache-affinity filter with its calibrated saturation release, the
// token-load, prefix-cache and no-hit-LRU scorers, and the calibration
// arithmetic (τ = peakPrefillThroughput × maxTTFTPenaltyMs / 1000).
//
// Data flows through per-request state: a prefix producer hashes the prompt
// once ([RequestKeys]) and stores each endpoint's match ([MatchOf]); the
// in-flight producer books load per endpoint ([LoadOf]); filters and scorers
// read both and never hash or book anything themselves.
package prefill
