"""Reading a file lowerd did not necessarily write (a build record, a document) as untrusted
input: a regular file only, at most `limit` bytes, and never blocking. A FIFO, a device (a link to
/dev/zero), a directory or a file past the limit is refused with a reason in words, before a
byte of it is read.

The file is opened with O_NONBLOCK (opening a FIFO with no writer would wait for one) and its
kind taken from fstat on that descriptor, so what is checked is what is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# What a file of each kind is called in a refusal.
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class NotRegularFile(OSError):
    """The path is there but is not a file to read: its kind, or its size, in words."""


def read_regular_file(path: Path, limit: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at `path` and its stat; FileNotFoundError when there is
    none; NotRegularFile when it is of another kind or larger than `limit` bytes."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            kind = _KINDS.get(stat.S_IFMT(status.st_mode), "not a regular file")
            raise NotRegularFile(f"not a regular file: {kind}")
        if status.st_size > limit:
            raise NotRegularFile(f"larger than {limit} bytes ({status.st_size})")
        data = _read_at_most(descriptor, limit + 1)
        if len(data) > limit:  # it grew since fstat
            raise NotRegularFile(f"larger than {limit} bytes")
        return data, status
    finally:
        os.close(descriptor)


def _read_at_most(descriptor: int, count: int) -> bytes:
    chunks, left = [], count
    while left > 0:
        chunk = os.read(descriptor, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
