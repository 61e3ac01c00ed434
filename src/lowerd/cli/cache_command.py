"""Which store `lowerd cache` looks after: the project's around the cwd (or --config), and what
it says when part of that store could not be read or changed."""

from __future__ import annotations

import sys

from lowerd.cache.location import format_size
from lowerd.cache.remote import error_reason
from lowerd.cache.remote_stats import remote_counts
from lowerd.cache.store import BlobStore
from lowerd.cache.tiered import TieredStore
from lowerd.cli.exit_codes import EXIT_OK, EXIT_TARGET_FAILED
from lowerd.project.config import choose_config, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.project_store import store_for


def open_store(config_path: str | None) -> BlobStore:
    """The store of the project around the cwd (or --config); the user's store outside one."""
    try:
        path = choose_config(config_path)
    except ConfigError:
        return store_for(None)
    return store_for(load_config(path))


def report(store: BlobStore, lines: list[str]) -> int:
    """Print lines, the command's report, and what of the store it could not read or remove
    (stderr, one line each); exit 0, since it did what it could. When the store's root could not
    be used at all, the report means nothing: one line on stderr says why, exit 1."""
    if store.unusable is not None:
        [why] = store.warnings()
        print(f"lowerd: {why}", file=sys.stderr)
        return EXIT_TARGET_FAILED
    for line in lines:
        print(line)
    for why in store.warnings():
        print(f"lowerd: warning: {why}", file=sys.stderr)
    return EXIT_OK


def remote_lines(store: BlobStore) -> list[str]:
    """The remote tier, asked now, and this machine's running totals of what builds asked it."""
    if not isinstance(store, TieredStore):
        return []
    remote = store.remote
    mode = "read-write" if remote.writable else "read-only"
    try:
        info = remote.server_info()
    except Exception as error:  # noqa: BLE001  # redis-py's errors and the socket's
        state = f"unavailable: {error_reason(error)}"
    else:
        cap = format_size(info["maxmemory"]) if info["maxmemory"] else "no maxmemory"
        used = format_size(int(info["used_memory"] or 0))
        state = f"ok, {mode}; {used} used of {cap}, {info['maxmemory_policy']}"
    totals = remote_counts(store.root)
    return [
        f"remote:  {remote.display_url} ({state}; trusts {remote.trust})",
        f"remote totals: {totals.hits} hits, {totals.misses} misses, {totals.puts} puts,"
        f" {totals.errors} errors, {totals.rejected} rejected (this machine's builds)",
    ]
