"""Read a file that someone else named (an editor's URI, a client's config path): only a regular
file, never blocking, never more than a cap.

A path can name a FIFO (whose open, then read, waits for a writer that never comes), a device
(/dev/zero reads forever) or a file of gigabytes; a server that reads it on its only thread stops
answering, or dies of MemoryError. The open is O_NONBLOCK (a FIFO opens at once), the opened
file's fstat must say regular file (a check of that file, not of whatever the path names a moment
later), and a file over the cap is refused before it is read. Each refusal is an OSError, so
callers that handle a missing or unreadable file handle these too.

It lives in cache/ because every layer may import cache/.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# What an editor or a config may ask lowerd to read: source files and pyproject.toml are KBs.
DEFAULT_CAP = 16 * 1024 * 1024


class NotARegularFile(OSError):
    def __init__(self, path: Path, kind: str):
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", str(path))


class FileTooLarge(OSError):
    def __init__(self, path: Path, size: int, cap: int):
        message = f"{size} bytes, over the {cap}-byte limit"
        super().__init__(errno.EFBIG, message, str(path))


def read_regular_file(path: Path, cap: int = DEFAULT_CAP) -> bytes:
    """The file's bytes; NotARegularFile, FileTooLarge or the open's OSError otherwise."""
    return read_regular_file_and_status(path, cap)[0]


def read_regular_file_and_status(path: Path, cap: int) -> tuple[bytes, os.stat_result]:
    """The file's bytes and the fstat of what was read (its mtime decides, for a build record,
    whether it is newer than a source)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise NotARegularFile(path, file_kind(found.st_mode))
        if found.st_size > cap:
            raise FileTooLarge(path, found.st_size, cap)
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        data = file.read(cap + 1)  # a file that grew since the fstat is still read to the cap only
    if len(data) > cap:
        raise FileTooLarge(path, len(data), cap)
    return data, found


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),  # of an lstat
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((words for test, words in kinds if test(mode)), "not a regular file")
