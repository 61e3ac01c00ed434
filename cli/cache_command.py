"""Which store `lowerd cache` looks after: the project's around the cwd (or --config)."""

from __future__ import annotations

from pathlib import Path

from lowerd.cache.store import BlobStore
from lowerd.lowering.config import ConfigError, find_config, load_config
from lowerd.lowering.project_store import store_for


def open_store(config_path: str | None) -> BlobStore:
    """The store of the project around the cwd (or --config); the user's store outside one."""
    try:
        path = Path(config_path) if config_path else find_config(Path.cwd())
    except ConfigError:
        return store_for(None)
    return store_for(load_config(path))
