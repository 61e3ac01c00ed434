"""What [tool.lowerd] says about sharing work beyond this machine: the remote cache tier (redis)
and the executor that builds stale targets (local forked workers, or tasks on a Ray cluster).

Environment overrides, read when a build opens its store or picks its executor, win over the
file, so one pyproject.toml serves read-only laptops and a CI that writes:
$LOWERD_CACHE_URL (cache_url; "" turns the tier off), $LOWERD_CACHE_REMOTE (cache_remote),
$LOWERD_CACHE_SIGN_KEY and $LOWERD_CACHE_VERIFY_KEY (their keys; absolute paths, "" for none).
The file's other cache_* keys hold when the URL comes from the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from lowerd.project.errors import ConfigError

RemoteMode = Literal["read-write", "read-only"]
REMOTE_MODES: tuple[RemoteMode, ...] = ("read-write", "read-only")
# redis-py's URL schemes: TCP, TLS, and a local socket.
CACHE_URL_SCHEMES = ("redis", "rediss", "unix")
Executor = Literal["local", "ray"]
EXECUTORS: tuple[Executor, ...] = ("local", "ray")

DEFAULT_REMOTE_TIMEOUT = 2.0  # seconds a redis command may take before the tier is given up
DEFAULT_REMOTE_MAX_ENTRY = "64M"  # larger values are neither sent nor taken


@dataclass(frozen=True)
class KeyFile:
    """A signing or verify key's file, and who named it: a key of the pyproject.toml (its file
    and line, where an unusable key is blamed) or an environment variable."""

    path: Path
    where: str  # "cache_remote_sign_key", "$LOWERD_CACHE_SIGN_KEY"
    config: Path | None = None
    line: int | None = None


@dataclass(frozen=True)
class RemoteCacheConfig:
    """The redis tier: read through on a local miss, written through on a fresh entry. The url
    is "" when the file names none: then only $LOWERD_CACHE_URL turns the tier on."""

    url: str
    mode: RemoteMode = "read-write"
    ttl: int | None = None  # seconds an entry lives in redis; None: until redis evicts it
    max_entry_size: str = DEFAULT_REMOTE_MAX_ENTRY
    timeout: float = DEFAULT_REMOTE_TIMEOUT
    sign_key: KeyFile | None = None  # signs what this machine puts
    verify_key: KeyFile | None = None  # the only signer whose entries this machine takes
    line: int | None = None  # of cache_url in pyproject.toml, where the editor says it is down

    @property
    def display_url(self) -> str:
        """The URL without its password, for messages and documents."""
        return redacted_url(self.url)


def remote_from_env(
    remote: RemoteCacheConfig | None, env: Mapping[str, str] = os.environ
) -> RemoteCacheConfig | None:
    """The tier a build uses: the file's, with the environment's overrides applied; None when
    neither names a URL."""
    remote = _apply_env(remote or RemoteCacheConfig(url=""), env)
    return remote if remote.url else None


def _apply_env(remote: RemoteCacheConfig, env: Mapping[str, str]) -> RemoteCacheConfig:
    url = env.get("LOWERD_CACHE_URL")
    if url is not None:
        url = check_cache_url(url, "$LOWERD_CACHE_URL") if url else ""
        remote = replace(remote, url=url, line=None)
    mode = env.get("LOWERD_CACHE_REMOTE")
    if mode:
        if mode not in REMOTE_MODES:
            raise ConfigError(
                f"$LOWERD_CACHE_REMOTE must be one of {', '.join(REMOTE_MODES)}, got {mode!r}"
            )
        remote = replace(remote, mode=mode)
    if (sign := env.get("LOWERD_CACHE_SIGN_KEY")) is not None:
        remote = replace(remote, sign_key=_key_from_env(sign, "LOWERD_CACHE_SIGN_KEY"))
    if (verify := env.get("LOWERD_CACHE_VERIFY_KEY")) is not None:
        remote = replace(remote, verify_key=_key_from_env(verify, "LOWERD_CACHE_VERIFY_KEY"))
    return remote


def _key_from_env(path: str, variable: str) -> KeyFile | None:
    if not path:
        return None
    # Absolute: a build's workers and a daemon run in other folders than the shell that set it.
    if not Path(path).expanduser().is_absolute():
        raise ConfigError(f"${variable} must be an absolute path, got {path!r}")
    return KeyFile(Path(path).expanduser(), f"${variable}")


def check_cache_url(url: str, where: str) -> str:
    """url if redis-py can take it; else a ConfigError naming where it came from."""
    parts = urlsplit(url)
    if parts.scheme not in CACHE_URL_SCHEMES or not (parts.hostname or parts.path):
        schemes = ", ".join(f"{scheme}://" for scheme in CACHE_URL_SCHEMES)
        raise ConfigError(
            f"{where} must be a redis URL ({schemes}), got {redacted_url(url)!r}"
            " (for example redis://cache.example.com:6379/0)"
        )
    return url


def redacted_url(url: str) -> str:
    """redis://user:secret@host/0 -> redis://user:***@host/0."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
