"""The blob store a project builds with: $LOWERD_CACHE_DIR, else config cache_dir, else the user's;
with the redis tier behind it when cache_url (or $LOWERD_CACHE_URL) names one.

Shared by the CLI and the daemon's workers, so both read and fill the same cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from lowerd.cache.location import DEFAULT_MAX_BYTES, default_cache_dir, parse_size
from lowerd.cache.remote import RemoteTier
from lowerd.cache.signing import KeyFileError, load_signing_key, load_verify_key
from lowerd.cache.store import BlobStore
from lowerd.cache.tiered import TieredStore
from lowerd.project.config import ProjectConfig
from lowerd.project.errors import ConfigError
from lowerd.project.team_config import KeyFile, RemoteCacheConfig, remote_from_env

K = TypeVar("K")


def store_for(config: ProjectConfig | None) -> BlobStore:
    root = configured_cache_dir(config) or default_cache_dir()
    max_bytes = DEFAULT_MAX_BYTES
    if config is not None and config.cache_max_size:
        max_bytes = _size(config, "cache_max_size", config.cache_max_size)
    remote = remote_from_env(config.remote_cache if config is not None else None)
    if remote is None:
        return BlobStore(root, max_bytes)
    return TieredStore(root, remote_tier(remote, config), max_bytes)


def configured_cache_dir(config: ProjectConfig | None) -> Path | None:
    """The config's cache_dir when it chooses the cache ($LOWERD_CACHE_DIR wins over it)."""
    if config is None or "LOWERD_CACHE_DIR" in os.environ:
        return None
    return config.cache_dir


def remote_tier(remote: RemoteCacheConfig, config: ProjectConfig | None) -> RemoteTier:
    return RemoteTier(
        remote.url,
        display_url=remote.display_url,
        writable=remote.mode == "read-write",
        ttl=remote.ttl,
        max_entry_bytes=_size(config, "cache_remote_max_entry_size", remote.max_entry_size),
        timeout=remote.timeout,
        signer=_key(remote.sign_key, load_signing_key),
        verifier=_key(remote.verify_key, load_verify_key),
    )


def _key(file: KeyFile | None, load: Callable[[Path], K]) -> K | None:
    """The key in file, or a ConfigError at the key (or variable) that named it."""
    if file is None:
        return None
    try:
        return load(file.path)
    except KeyFileError as error:
        raise ConfigError(f"{file.where}: {error}", file.config, file.line) from None


def _size(config: ProjectConfig | None, name: str, text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as error:
        raise ConfigError(f"{name}: {error}", config.path if config else None) from error
