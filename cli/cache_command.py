"""Which store `lowerd cache` looks after: the project's around the cwd (or --config), and what
it says when part of that store could not be read or changed."""

from __future__ import annotations

import sys
from pathlib import Path

from lowerd.cache.store import BlobStore
from lowerd.exit_codes import EXIT_OK, EXIT_TARGET_FAILED
from lowerd.project.config import find_config, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.project_store import store_for


def open_store(config_path: str | None) -> BlobStore:
    """The store of the project around the cwd (or --config); the user's store outside one."""
    try:
        path = Path(config_path) if config_path else find_config(Path.cwd())
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
