"""The `lowerd` command line: a client of the warm daemon (or of in-process build workers)."""
