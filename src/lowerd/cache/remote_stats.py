"""This machine's running totals of what its builds asked of the remote tier, beside its local
store (`remote-stats.msgpack`), for `lowerd cache stats`. Concurrent workers add under a lock;
a damaged file counts from zero rather than failing a build."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import msgpack

from .atomic import write_atomic
from .remote import RemoteCounts

STATS_FILE = "remote-stats.msgpack"
_LOCK_FILE = ".remote-stats.lock"


def remote_counts(root: Path) -> RemoteCounts:
    try:
        raw = msgpack.unpackb((root / STATS_FILE).read_bytes())
    except (OSError, ValueError, msgpack.UnpackException):
        return RemoteCounts()
    return RemoteCounts.from_json(raw)


def add_remote_counts(root: Path, counts: RemoteCounts) -> None:
    """Add one build's counts; an unwritable store loses them (its own problems say why)."""
    try:
        fd = os.open(root / _LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        total = remote_counts(root).add(counts)
        write_atomic(root / STATS_FILE, msgpack.packb(total.to_json()))
    except OSError:
        pass
    finally:
        os.close(fd)
