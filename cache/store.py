"""A content-addressed blob store on disk: verified on every read, atomic on every write.

Layout: <root>/blobs/<first two characters of the key>/<key>. An entry file holds MAGIC, the
sha256 digest of the payload, then the payload. Anything else found at a key's path is a miss
and is removed. Eviction is least-recently-used by mtime, which every hit refreshes.

Several processes may share one store: writers publish with os.replace, so readers see a whole
old entry, a whole new one or none; reads, scans and removals tolerate another process having
removed a file first; and gc and clear remove files only, so a concurrent put never loses the
directory it is writing into.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .location import DEFAULT_MAX_BYTES

MAGIC = b"LWB1"
_HEADER_SIZE = len(MAGIC) + hashlib.sha256().digest_size
_KEY = re.compile(r"[0-9a-f]{16,128}")
# The leading dot keeps a temp file from ever being taken for an entry.
_TEMP_PREFIX = ".tmp-"
# A temp file this old was left by a writer that died, not one still writing.
_STALE_TEMP_SECONDS = 3600
_PRIVATE_DIR = 0o700


@dataclass(frozen=True)
class StoreStats:
    root: Path
    entries: int
    total_bytes: int
    max_bytes: int | None


@dataclass(frozen=True)
class GcResult:
    removed_entries: int
    removed_bytes: int
    remaining_bytes: int


@dataclass(frozen=True)
class _File:
    path: Path
    size: int
    mtime: float


class BlobStore:
    """Payloads by key under root; sizes count whole entry files, header included."""

    def __init__(self, root: Path, max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.corrupt_removed = 0
        self._blobs = self.root / "blobs"

    def get(self, key: str) -> bytes | None:
        """The payload stored under key, or None if it is missing or fails verification."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        payload = _decode(data)
        if payload is None:
            self._discard_corrupt(path)
            return None
        _touch(path)
        return payload

    def put(self, key: str, payload: bytes) -> None:
        """Store payload under key, replacing any previous entry atomically."""
        path = self._path(key)
        self._make_dirs(path.parent)
        # mkstemp creates the file with mode 0o600, and os.replace keeps that mode.
        fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(MAGIC)
                file.write(hashlib.sha256(payload).digest())
                file.write(payload)
            os.replace(temp, path)
        except BaseException:
            _unlink(Path(temp))
            raise

    def contains(self, key: str) -> bool:
        """Whether an entry exists under key, without reading or verifying it."""
        return self._path(key).is_file()

    def stats(self) -> StoreStats:
        entries = self._entries()
        total = sum(entry.size for entry in entries)
        return StoreStats(self.root, len(entries), total, self.max_bytes)

    def gc(self, max_bytes: int | None = None) -> GcResult:
        """Evict least-recently-used entries until at most max_bytes remain.

        max_bytes defaults to self.max_bytes; if both are None nothing is evicted. Temp files
        abandoned by dead writers are removed either way.
        """
        limit = self.max_bytes if max_bytes is None else max_bytes
        self._remove_stale_temps()
        oldest_first = sorted(self._entries(), key=lambda entry: (entry.mtime, entry.path.name))
        remaining = sum(entry.size for entry in oldest_first)
        removed_entries = removed_bytes = 0
        for entry in oldest_first:
            if limit is None or remaining <= limit:
                break
            remaining -= entry.size
            # Another process may have evicted it first: it is gone either way, but not by us.
            if _unlink(entry.path):
                removed_entries += 1
                removed_bytes += entry.size
        return GcResult(removed_entries, removed_bytes, remaining)

    def clear(self) -> int:
        """Remove every entry; returns how many this call removed."""
        self._remove_stale_temps()
        return sum(_unlink(entry.path) for entry in self._entries())

    def enforce_limit(self) -> GcResult:
        """Bring the store under self.max_bytes; meant to run once after a build."""
        return self.gc(self.max_bytes)

    def _path(self, key: str) -> Path:
        # The key becomes a file name, so anything but plain hex could escape the store.
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"invalid cache key {key!r}: expected 16 to 128 lowercase hex digits")
        return self._blobs / key[:2] / key

    def _make_dirs(self, shard: Path) -> None:
        # mkdir(parents=True) gives the parents it creates the default mode, so each of the
        # store's own directories is made explicitly to keep it private.
        self.root.mkdir(mode=_PRIVATE_DIR, parents=True, exist_ok=True)
        self._blobs.mkdir(mode=_PRIVATE_DIR, exist_ok=True)
        shard.mkdir(mode=_PRIVATE_DIR, exist_ok=True)

    def _discard_corrupt(self, path: Path) -> None:
        # A concurrent put may have replaced the bad file since it was read; removing that good
        # entry costs one rebuild, never a wrong result.
        if _unlink(path):
            self.corrupt_removed += 1

    def _entries(self) -> list[_File]:
        return [file for file in self._files() if _KEY.fullmatch(file.path.name)]

    def _remove_stale_temps(self) -> None:
        cutoff = time.time() - _STALE_TEMP_SECONDS
        for file in self._files():
            if file.path.name.startswith(_TEMP_PREFIX) and file.mtime < cutoff:
                _unlink(file.path)

    def _files(self) -> Iterator[_File]:
        """Every regular file in every shard, skipping any removed while being listed."""
        for shard in _list_dir(self._blobs):
            if not shard.is_dir(follow_symlinks=False):
                continue
            for entry in _list_dir(Path(shard.path)):
                info = _lstat(entry)
                if info is not None and stat.S_ISREG(info.st_mode):
                    yield _File(Path(entry.path), info.st_size, info.st_mtime)


def _decode(data: bytes) -> bytes | None:
    """The payload if data is a whole, unaltered entry; None otherwise."""
    if len(data) < _HEADER_SIZE or not data.startswith(MAGIC):
        return None
    payload = data[_HEADER_SIZE:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : _HEADER_SIZE]:
        return None
    return payload


def _touch(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.utime(path)


def _unlink(path: Path) -> bool:
    """Remove path; False if it was already gone."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def _list_dir(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except FileNotFoundError:
        return []


def _lstat(entry: os.DirEntry[str]) -> os.stat_result | None:
    try:
        return entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
