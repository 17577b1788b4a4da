"""Stream entries into Arrow rows (executor): decoders, cut pages, compiled kernels."""
