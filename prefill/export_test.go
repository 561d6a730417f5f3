package prefill

// ChainKeysGeneric is ChainKeys without the 16-token fast path (tests).
func ChainKeysGeneric(dst []uint64, seed uint64, ids []uint32, blockSize, maxBlocks int) []uint64 {
	n := len(ids) / blockSize
	if maxBlocks > 0 && n > maxBlocks {
		n = maxBlocks
	}
	prev := seed
	for b := 0; b < n; b++ {
		prev = chainBlock(prev, ids[b*blockSize:(b+1)*blockSize])
		dst = append(dst, prev)
	}
	return dst
}
