// Package tokenproducer counts a request's prompt tokens — text and
// multimodal separately — for every token-based load signal, and registers
// the `token-producer` plugin with the profiles framework.
//
// Text is counted by a backend: `estimate` (llm-d compatible, ~4 bytes per
// token over role + text + tools JSON, no tokenizer), `tiktoken` (embedded
// offline BPE vocabularies, cl100k/o200k-family models) or `model-server`
// (the engine's POST /tokenize, bounded in time and concurrency, falling
// back to estimate). Images are counted exactly per model family (Qwen2-VL,
// Qwen2.5-VL, Qwen3-VL smart_resize; LLaVA-1.5; LLaVA-NeXT anyres) from
// their header-only size (package imagesize), or with llm-d's dynamic and
// static estimates. When responses report usage.prompt_tokens the ratio
// actual/estimated is tracked per model, text-only and image-bearing apart,
// and applied to later estimates when calibrateFromUsage is set.
//
// What a request carries after Produce (profiles.Request.Tokens):
//   - Text: text tokens, including chat-template wrapper tokens of images;
//   - Image: image, video and audio tokens (placeholder tokens the encoder fills);
//   - Weighted: Text + Image × imageTokenCost, the prefill load;
//   - IDs: token ids from the tokenizer when the backend has them, else stable
//     pseudo-ids (4 prompt bytes per id, images as runs of an id derived from
//     their content hash), so the prefix index works either way;
//   - Images: one entry per req.Multimodal item, same order: size, tokens,
//     content hash (xxhash64 of kind, NUL and the item's URL string — the
//     whole data: URL, or the remote URL), and whether the size was a default.
package tokenproducer
