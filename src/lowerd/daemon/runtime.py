"""Where a project's daemon can be found: a private runtime folder, its socket and its status file.

As dmypy does: a status file per project records the daemon's pid, its socket and what it was
started with; a client that finds a dead pid there removes the leftovers. A live pid is believed
only while the project's instance lock is held: a pid reused by another process does not hold it.

The folder is the security boundary, so it must be the user's own and closed to everyone else
(0700): an existing one that is not is refused, never repaired, since someone else may use it.

Standard library only: the client side of `lowerd build` must start in milliseconds.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import stat
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowerd.cache.atomic import write_atomic
from lowerd.cache.regular_file import file_kind, read_regular_file
from lowerd.project.build_state import tool_versions
from lowerd.project.config import ProjectConfig
from lowerd.project.version import LOWERD_VERSION
from lowerd.project.wire import decode, encode

# Environment a build reads in the daemon's processes rather than the client's: a client with
# other values must not be served by a daemon started with these.
DAEMON_ENVIRONMENT = ("LOWERD_CACHE_DIR", "XDG_CACHE_HOME")
# sun_path holds 108 bytes with its terminating NUL.
MAX_SOCKET_PATH = 107
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_STATUS_CAP = 1024 * 1024  # a status file is a few hundred bytes


class RuntimeDirError(Exception):
    """The runtime folder is missing, or not private to this user: no daemon can be used."""


# A planted link must not redirect a write, nor a FIFO block the open: O_NONBLOCK only matters
# for the latter (a FIFO's open waits for a peer), and is taken off a regular file at once.
_RUNTIME_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def open_runtime_file(path: Path, flags: int) -> int:
    """Open (or with O_CREAT make, 0600) a regular file of this user's in the runtime folder;
    a link, FIFO, folder or anything else there is refused, never followed or used."""
    try:
        fd = os.open(path, flags | _RUNTIME_FILE_FLAGS, 0o600)
    except OSError as error:
        raise RuntimeDirError(_open_refusal(path, error)) from None
    try:
        _check_runtime_file(path, os.fstat(fd))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_runtime_file(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise RuntimeDirError(_not_a_file(path, info.st_mode))
    if info.st_uid != os.geteuid():
        raise RuntimeDirError(f"{path} belongs to uid {info.st_uid}, not to uid {os.geteuid()}")
    if info.st_nlink != 1:  # a hard link to a file elsewhere is as planted as a symbolic one
        raise RuntimeDirError(f"{path} has {info.st_nlink} hard links; lowerd made it with one")


def _open_refusal(path: Path, error: OSError) -> str:
    """Why a runtime file did not open: what is in its place, when that is not a file."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return _not_a_file(path, mode)
    return f"cannot open {path}: {error.strerror or error}"


def _not_a_file(path: Path, mode: int) -> str:
    return f"{path} is {file_kind(mode)}, not a file lowerd made there: refused, never followed"


def runtime_dir() -> Path:
    """$XDG_RUNTIME_DIR/lowerd, else lowerd-<uid> in the temp folder; made 0700 if missing."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(base, "lowerd") if base else Path(tempfile.gettempdir(), f"lowerd-{os.geteuid()}")
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise RuntimeDirError(f"cannot create {folder}: {error.strerror or error}") from None
    check_private(folder, stat.S_ISDIR, 0o700)
    return folder


def check_private(path: Path, is_kind: Any, mode: int) -> None:
    """Refuse a path that is a link, of another kind, another user's, or open to others."""
    try:
        info = os.lstat(path)
    except OSError as error:
        raise RuntimeDirError(f"cannot use {path}: {error.strerror or error}") from None
    if not is_kind(info.st_mode):
        raise RuntimeDirError(f"{path} is not what lowerd made there (a link or another kind)")
    if info.st_uid != os.geteuid():
        raise RuntimeDirError(f"{path} belongs to uid {info.st_uid}, not to uid {os.geteuid()}")
    if stat.S_IMODE(info.st_mode) != mode:
        found = oct(stat.S_IMODE(info.st_mode))
        raise RuntimeDirError(f"{path} has mode {found}; lowerd needs {oct(mode)}")


@dataclass(frozen=True)
class DaemonPaths:
    """The files of one project's daemon, all in the runtime folder, named by the project root."""

    folder: Path
    key: str

    @classmethod
    def for_root(cls, root: Path) -> DaemonPaths:
        key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
        paths = cls(runtime_dir(), key)
        if len(os.fsencode(paths.socket)) > MAX_SOCKET_PATH:
            raise RuntimeDirError(f"{paths.socket} is too long for a Unix socket path")
        return paths

    @property
    def status(self) -> Path:
        return self.folder / f"{self.key}.json"

    @property
    def socket(self) -> Path:
        return self.folder / f"{self.key}.sock"

    @property
    def lock(self) -> Path:
        return self.folder / f"{self.key}.lock"

    @property
    def log(self) -> Path:
        return self.folder / f"{self.key}.log"

    def open_log(self) -> int:
        """The daemon's log for writing. Appended, never truncated: a daemon started at the same
        time by another client (that finds this one running and leaves) writes to it too."""
        return open_runtime_file(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


@dataclass(frozen=True)
class DaemonStatus:
    pid: int
    socket: str
    root: str
    kind: str  # "headless" (lowerd daemon start) or "lsp" (lowerd serve, started by an editor)
    version: str
    tool_versions: list[str]
    scope: str  # daemon_scope() of the config and environment it was started with
    started: float
    log: str | None = None

    def mismatch(self, config: ProjectConfig) -> str | None:
        """Why this daemon cannot serve a client with this config and environment, or None."""
        if self.version != LOWERD_VERSION:
            return f"lowerd {self.version} is running, this is {LOWERD_VERSION}"
        if self.tool_versions != list(tool_versions()):
            return "torch, executorch or lowerd was installed anew since the daemon started"
        if self.scope != daemon_scope(config):
            return "daemon-scoped options or environment changed since the daemon started"
        return None


def daemon_scope(config: ProjectConfig) -> str:
    """A digest of what a daemon fixes when it starts: the backends its workers preload, and the
    environment its workers inherit."""
    scope = {
        "preload": preload_backends(config),
        "environment": {name: os.environ.get(name) for name in DAEMON_ENVIRONMENT},
    }
    return hashlib.sha256(json.dumps(scope, sort_keys=True).encode()).hexdigest()


def preload_backends(config: ProjectConfig) -> list[str]:
    """Every backend some target uses, in first-use order: the fork server imports them once."""
    names = (name for target in config.targets.values() for name in target.backends)
    return list(dict.fromkeys(names))


def new_status(paths: DaemonPaths, config: ProjectConfig, kind: str) -> DaemonStatus:
    return DaemonStatus(
        pid=os.getpid(),
        socket=str(paths.socket),
        root=str(config.root),
        kind=kind,
        version=LOWERD_VERSION,
        tool_versions=list(tool_versions()),
        scope=daemon_scope(config),
        started=time.time(),
        log=str(paths.log) if kind == "headless" else None,
    )


def write_status(paths: DaemonPaths, status: DaemonStatus) -> None:
    # 0600, as read_status requires; the rename makes a reader see all of it or none.
    write_atomic(paths.status, json.dumps(encode(status)).encode(), mode=0o600)


def read_status(paths: DaemonPaths) -> DaemonStatus | None:
    """The running daemon's status; None when there is none. A dead daemon's files are removed."""
    try:
        check_private(paths.status, stat.S_ISREG, 0o600)
        status = decode(DaemonStatus, json.loads(_status_bytes(paths)))
    except (RuntimeDirError, OSError, ValueError):  # a WireError is a ValueError
        return None  # missing, or not a status file lowerd wrote: nothing to trust or remove
    if process_alive(status.pid) and InstanceLock(paths).held():
        return status
    remove_files(paths, status.pid)
    return None


def remove_files(paths: DaemonPaths, pid: int) -> None:
    """Remove the status file and socket of the daemon with this pid, if they are still its."""
    try:
        current = json.loads(_status_bytes(paths))
    except (OSError, ValueError):
        return
    if isinstance(current, dict) and current.get("pid") == pid:
        # The socket first: a status file that names a socket promises that it is there.
        paths.socket.unlink(missing_ok=True)
        paths.status.unlink(missing_ok=True)


def _status_bytes(paths: DaemonPaths) -> bytes:
    """The status file, never blocking on a FIFO swapped in after the check (its size: bytes)."""
    return read_regular_file(paths.status, _STATUS_CAP)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone's process: not ours, but the pid is taken
    # A daemon killed while its parent does not reap it lingers as a zombie.
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rpartition(")")[2].split()[0] not in ("Z", "X")


def peer_uid(sock: Any) -> int:  # a socket, or asyncio's TransportSocket around one
    """The uid of the process at the other end of a connected Unix socket, from the kernel: both
    ends check it, so neither serves nor trusts another user's process."""
    return peer_credentials(sock)[1]


def peer_credentials(sock: Any) -> tuple[int, int]:
    """The pid and uid of the process at the other end of a connected Unix socket."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, _ = _UCRED.unpack(credentials)
    return pid, uid


class InstanceLock:
    """Held by the running daemon of a project: a second one started at the same time (two
    clients autostarting at once) finds it taken and leaves. The kernel drops it when the daemon
    dies, however it dies."""

    def __init__(self, paths: DaemonPaths):
        self.path = paths.lock
        self.fd: int | None = None

    def acquire(self) -> bool:
        """Raises RuntimeDirError when the lock's path holds anything but lowerd's own file."""
        fd = open_runtime_file(self.path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def held(self) -> bool:
        """Whether a daemon holds it now (tried and let go at once when none does)."""
        if not self.acquire():
            return True
        self.release()
        return False
