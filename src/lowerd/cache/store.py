"""A content-addressed blob store on disk: verified on every read, atomic on every write.

Layout: <root>/blobs/<first two characters of the key>/<key>[.<kind>]. An entry file is one entry
(cache/entry.py), bound to the name it was stored under: a file copied or linked over another
entry's path fails the check. Anything else found at a key's path (a damaged file, another key's
entry, a symlink, a FIFO) is a miss and is removed. Eviction is least-recently-used by mtime,
which every hit refreshes.

A broken store never raises OSError: a read is a miss, a write is not stored, a scan counts what
it could read, and each problem is noted in `problems` for the caller to report.

Several processes may share one store: writers publish with os.replace, so readers see a whole
old entry, a whole new one or none; reads, scans and removals tolerate another process having
removed a file first; and gc and clear remove files only, so a concurrent put never loses the
directory it is writing into.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .atomic import write_atomic
from .entry import DEFAULT_KIND, MAGIC, OLD_MAGICS, check_name, decode_entry, entry_head
from .location import DEFAULT_MAX_BYTES

__all__ = ["DEFAULT_KIND", "MAGIC", "BlobStore", "GcResult", "StoreProblem", "StoreStats"]

_ENTRY_NAME = re.compile(r"[0-9a-f]{16,128}(?:\.[a-z][a-z0-9_]{0,31})?")
_SHARD = re.compile(r"[0-9a-f]{2}")
# O_NOFOLLOW: a symlink is never an entry we wrote. O_NONBLOCK: opening a FIFO must not wait
# for a writer; fstat then shows it is no regular file.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# The leading dot keeps a temp file from ever being taken for an entry.
_TEMP_PREFIX = ".tmp-"
# A temp file this old was left by a writer that died, not one still writing.
_STALE_TEMP_SECONDS = 3600
_PRIVATE_DIR = 0o700
# A store broken at its root would note the same few problems for every key; keep the first.
_MAX_PROBLEMS = 20


@dataclass(frozen=True)
class StoreProblem:
    """A part of the store that could not be used; the operation went on without it."""

    action: str  # "read", "write" or "remove"
    path: Path
    reason: str  # the system's words: "Not a directory", "Permission denied"

    def __str__(self) -> str:
        return f"cannot {self.action} {self.path} ({self.reason})"


@dataclass(frozen=True)
class StoreStats:
    root: Path
    entries: int
    total_bytes: int
    max_bytes: int | None
    temp_files: int = 0  # left by writers still writing, or killed while they wrote
    temp_bytes: int = 0
    problems: tuple[StoreProblem, ...] = ()


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


@dataclass
class _Scan:
    entries: list[_File] = field(default_factory=list)
    temps: list[_File] = field(default_factory=list)


class BlobStore:
    """Payloads by (key, kind) under root; sizes count whole entry files, header included."""

    def __init__(self, root: Path, max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.corrupt_removed = 0
        self.problems: list[StoreProblem] = []
        # Entries not stored, by the system's reason: a full disk fails every put, and is said in
        # one line (warnings), not one per entry.
        self.unstored: dict[str, int] = {}
        self._blobs = self.root / "blobs"

    @property
    def unusable(self) -> StoreProblem | None:
        """The problem that makes the whole store unusable (its root or blobs folder), if any."""
        return next((p for p in self.problems if p.path in (self.root, self._blobs)), None)

    def warnings(self) -> list[str]:
        """The problems met so far, for people: one line if the whole store is unusable."""
        if (unusable := self.unusable) is not None:
            return [f"cache at {self.root} is unusable ({unusable.reason})"]
        lines = [f"cache: {problem}" for problem in self.problems if problem.action != "write"]
        for reason, count in self.unstored.items():
            entries = "1 entry" if count == 1 else f"{count} entries"
            lines.append(f"cache: {entries} not stored in {self.root} ({reason})")
        return lines

    def get(self, key: str, kind: str = DEFAULT_KIND) -> bytes | None:
        """The payload stored under key for kind, or None if it is missing or fails verification."""
        path = self._path(key, kind)
        try:
            fd = os.open(path, _READ_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as error:
            # ELOOP: a symlink (O_NOFOLLOW); ENXIO: a socket. Neither is an entry we wrote.
            if error.errno in (errno.ELOOP, errno.ENXIO):
                self._discard(path, opened=None)
            else:
                self._note("read", path, error)
            return None
        try:
            return self._read_entry(fd, path, key, kind)
        except OSError as error:
            self._note("read", path, error)
            return None
        finally:
            os.close(fd)

    def put(self, key: str, payload: bytes, kind: str = DEFAULT_KIND) -> bool:
        """Store payload under key for kind, replacing any previous entry atomically.

        False when the store could not take it: the reason is in `problems` (unless a concurrent
        clear removed the file being written, which is no problem).
        """
        path = self._path(key, kind)
        if (unmade := self._make_dirs(self.root, self._blobs, path.parent)) is not None:
            self._count_unstored(unmade)
            return False
        try:
            write_atomic(path, (entry_head(key, kind, payload), payload), temp_prefix=_TEMP_PREFIX)
        except FileNotFoundError as error:
            if path.parent.is_dir():  # a concurrent clear removed the temp file: nothing stored
                return False
            self._not_stored(path.parent, error)
            return False
        except OSError as error:
            self._not_stored(path, error)
            return False
        return True

    # This machine's copy alone, never a remote tier's (cache/tiered.py overrides get and put):
    # for memos of what the installed torch and ExecuTorch compute by themselves, keyed by their
    # versions, not by any content a reader could check. A team cache would serve them at a
    # round trip's cost and could decide them for every reader; each machine makes them once.
    def get_here(self, key: str, kind: str = DEFAULT_KIND) -> bytes | None:
        return BlobStore.get(self, key, kind)

    def put_here(self, key: str, payload: bytes, kind: str = DEFAULT_KIND) -> bool:
        return BlobStore.put(self, key, payload, kind)

    def _not_stored(self, path: Path, error: OSError) -> None:
        self._note("write", path, error)
        self._count_unstored(error)

    def _count_unstored(self, error: OSError) -> None:
        reason = error.strerror or str(error)
        self.unstored[reason] = self.unstored.get(reason, 0) + 1

    def contains(self, key: str, kind: str = DEFAULT_KIND) -> bool:
        """Whether an entry file exists under key, without reading or verifying it."""
        try:
            return stat.S_ISREG(os.lstat(self._path(key, kind)).st_mode)
        except OSError:
            return False

    def check(self) -> StoreProblem | None:
        """Make the store's folders; the problem that makes it unusable, if any."""
        self._make_dirs(self.root, self._blobs)
        return self.unusable

    def stats(self) -> StoreStats:
        scan = self._scan()
        return StoreStats(
            root=self.root,
            entries=len(scan.entries),
            total_bytes=_size(scan.entries),
            max_bytes=self.max_bytes,
            temp_files=len(scan.temps),
            temp_bytes=_size(scan.temps),
            problems=tuple(self.problems),
        )

    def gc(self, max_bytes: int | None = None) -> GcResult:
        """Evict least-recently-used entries until at most max_bytes remain.

        max_bytes defaults to self.max_bytes; if both are None nothing is evicted. Temp files
        abandoned by dead writers are removed either way.
        """
        limit = self.max_bytes if max_bytes is None else max_bytes
        scan = self._scan()
        cutoff = time.time() - _STALE_TEMP_SECONDS
        self._remove_files(temp for temp in scan.temps if temp.mtime < cutoff)
        oldest_first = sorted(scan.entries, key=lambda entry: (entry.mtime, entry.path.name))
        remaining = _size(oldest_first)
        removed_entries = removed_bytes = 0
        for entry in oldest_first:
            if limit is None or remaining <= limit:
                break
            remaining -= entry.size
            # Another process may have evicted it first: it is gone either way, but not by us.
            if self._remove(entry.path):
                removed_entries += 1
                removed_bytes += entry.size
        return GcResult(removed_entries, removed_bytes, remaining)

    def clear(self) -> int:
        """Remove every entry and every temp file; returns how many entries this call removed.

        A writer whose temp file goes stores nothing: its put returns False.
        """
        scan = self._scan()
        self._remove_files(scan.temps)
        return self._remove_files(scan.entries)

    def enforce_limit(self) -> GcResult:
        """Bring the store under self.max_bytes; meant to run once after a build."""
        return self.gc(self.max_bytes)

    def _path(self, key: str, kind: str) -> Path:
        check_name(key, kind)  # the key becomes a file name: anything but plain hex could escape
        name = key if kind == DEFAULT_KIND else f"{key}.{kind}"
        return self._blobs / key[:2] / name

    def _read_entry(self, fd: int, path: Path, key: str, kind: str) -> bytes | None:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            self._discard(path, opened)
            return None
        data = _read_all(fd, opened.st_size)
        payload = decode_entry(data, key, kind)
        if payload is None:
            self._discard(path, opened, corrupt=not data.startswith(OLD_MAGICS))
            return None
        os.utime(fd)  # a hit makes the entry the most recently used
        return payload

    def _discard(self, path: Path, opened: os.stat_result | None, corrupt: bool = True) -> None:
        """Remove what is at path (never what a symlink points to), if it is what was opened."""
        try:
            now = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as error:
            self._note("remove", path, error)
            return
        if stat.S_ISDIR(now.st_mode):
            self._note("read", path, os.strerror(errno.EISDIR))
            return
        if opened is not None and (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
            return  # a concurrent put replaced it since it was opened: that one is sound
        if self._remove(path) and corrupt:
            self.corrupt_removed += 1

    def _make_dirs(self, *folders: Path) -> OSError | None:
        """Makes the folders; the error that stopped it (noted), if any."""
        # mkdir(parents=True) gives the parents it creates the default mode, so each of the
        # store's own directories is made explicitly to keep it private.
        for folder in folders:
            try:
                _make_private_dir(folder, parents=folder == self.root)
            except OSError as error:
                self._note("write", folder, error)
                return error
        return None

    def _scan(self) -> _Scan:
        """Every entry and temp file in every shard, skipping any removed while being listed."""
        scan = _Scan()
        for shard in self._list(self._blobs):
            if not _SHARD.fullmatch(shard.name):
                continue  # not a folder of ours
            if not _is_real_dir(shard):
                self._note("read", Path(shard.path), os.strerror(errno.ENOTDIR))
                continue
            for entry in self._list(Path(shard.path)):
                file = self._regular_file(entry)
                if file is None:
                    continue
                if _ENTRY_NAME.fullmatch(entry.name):
                    scan.entries.append(file)
                elif entry.name.startswith(_TEMP_PREFIX):
                    scan.temps.append(file)
        return scan

    def _list(self, folder: Path) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(folder) as entries:
                return list(entries)
        except FileNotFoundError:
            return []
        except OSError as error:
            self._note("read", folder, error)
            return []

    def _regular_file(self, entry: os.DirEntry[str]) -> _File | None:
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as error:
            self._note("read", Path(entry.path), error)
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return _File(Path(entry.path), info.st_size, info.st_mtime)

    def _remove_files(self, files: Iterable[_File]) -> int:
        return sum(self._remove(file.path) for file in files)

    def _remove(self, path: Path) -> bool:
        """Unlink path; False if it was already gone or could not be removed."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as error:
            self._note("remove", path, error)
            return False
        return True

    def _note(self, action: str, path: Path, why: OSError | str) -> None:
        reason = why if isinstance(why, str) else why.strerror or str(why)
        problem = StoreProblem(action, path, reason)
        if problem not in self.problems and len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(problem)


def _read_all(fd: int, size_hint: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, max(size_hint, 1 << 16)):
        chunks.append(chunk)
    return b"".join(chunks)


def _make_private_dir(folder: Path, parents: bool) -> None:
    try:
        folder.mkdir(mode=_PRIVATE_DIR, parents=parents, exist_ok=True)
    except FileExistsError as error:  # a file where the folder should be; say so plainly
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder)) from error


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _size(files: Iterable[_File]) -> int:
    return sum(file.size for file in files)
