"""A content-addressed store of bytes: keys, verify-on-read, eviction. Knows nothing of torch."""
