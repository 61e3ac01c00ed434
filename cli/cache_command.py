"""The blob store a command uses: $LOWERD_CACHE_DIR, else config cache_dir, else the user's."""

from __future__ import annotations

import os
from pathlib import Path

from lowerd.cache.location import DEFAULT_MAX_BYTES, default_cache_dir, parse_size
from lowerd.cache.store import BlobStore
from lowerd.lowering.config import ConfigError, ProjectConfig, find_config, load_config


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


def open_store(config_path: str | None) -> BlobStore:
    """The store of the project around the cwd (or --config); the user's store outside one."""
    try:
        path = Path(config_path) if config_path else find_config(Path.cwd())
    except ConfigError:
        return store_for(None)
    return store_for(load_config(path))
