"""The blob store a project builds with: $LOWERD_CACHE_DIR, else config cache_dir, else the user's.

Shared by the CLI and the daemon's workers, so both read and fill the same cache.
"""

from __future__ import annotations

import os

from lowerd.cache.location import DEFAULT_MAX_BYTES, default_cache_dir, parse_size
from lowerd.cache.store import BlobStore
from lowerd.project.config import ProjectConfig
from lowerd.project.errors import ConfigError


def store_for(config: ProjectConfig | None) -> BlobStore:
    root = default_cache_dir()
    if config is not None and config.cache_dir is not None and "LOWERD_CACHE_DIR" not in os.environ:
        root = config.cache_dir
    max_bytes = DEFAULT_MAX_BYTES
    if config is not None and config.cache_max_size:
        try:
            max_bytes = parse_size(config.cache_max_size)
        except ValueError as error:
            raise ConfigError(f"cache_max_size: {error}", config.path) from error
    return BlobStore(root, max_bytes)
