"""Example models for `lowerd build`; the config's folder is on sys.path, so this is `models`."""
