// Package encode holds the encode-pool plugins of an E-P-D deployment. The
// encode-filter is in package profiles (a role filter); this package adds
//
//   - encode-queue-scorer: scores encoders by queue depth = multimodal items
//     the picker itself has in flight on the encoder + the encoder's scraped
//     waiting queue (vllm:num_requests_waiting);
//   - mm-embeddings-cache-producer: remembers which encoder holds which
//     item's embeddings (by content hash), recorded against the encoder that
//     served the item, in a bounded LRU per encoder (cacheSizeInMBPerServer);
//   - mm-embeddings-cache-scorer: encoder-cache affinity, 1 for the encoder
//     that holds the item's embeddings, 0 elsewhere.
//
// Under the disagg-profile-handler the encode profile runs once per item
// (profiles.EncodeItem tells which), and the encode profile's
// ProfileResult.Targets[i] is item i's encoder.
package encode
