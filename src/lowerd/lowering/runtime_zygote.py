"""The runtime zygote: the process a build worker's runtime children are forked from.

The rule (docs/guarantees.md): nothing lowerd forks inherits a threaded torch. A worker's eager
run starts GNU OpenMP's thread pool; a fork of the worker has the pool's bookkeeping without
its threads, and its first parallel ATen op waited on them for ever (gomp_team_barrier_wait_end,
issue 32 point 1). So a verifying worker forks this zygote at its start, before its entry runs
a torch op, while it has one thread (/proc/self/task); the zygote never runs torch and forks
one child per runtime request: each child starts from a process that never had a torch thread,
with torch and ExecuTorch already imported (the fork server's preload), and ATen and the
runtime make their thread pools in it afresh.

The worker and its zygote speak over a socket pair, one frame per message (multiprocessing's
length-prefixed frames): to the zygote ZygoteForked once, then per run the request's bytes
(runtime_run.py encodes them); from it ChildStarted (the child's pid, the zygote's threads when
it forked it), then ChildEnded (the child's exit status and what it wrote on its pipe, which the
zygote relays). A child that does not end within the timeout is killed by the worker, by its
pid; the zygote reaps it and says so.

The zygote and its children die with their parent (PR_SET_PDEATHSIG, and exit at once when the
parent was gone before that was set); the zygote also ends when the worker closes its end, which
the worker does before it exits (`stop_zygote`), waiting for it so that the CPU the runtime
used counts in the worker's.

A process that asks for a run without having started its zygote (a build run in-process by a
test or a bench) gets one forked then. If that process has threads besides the forking one
(counted after the fork, so that OpenBLAS's, which its fork handler retires, do not count), the
zygote is `threaded`: its children may have inherited a started OpenMP pool, and each puts
ATen on one thread before the runtime runs (`serve`'s flag), the workaround kept for them only.
"""

from __future__ import annotations

import os
import signal
import socket
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import ClassVar, TypeVar

import msgpack

from lowerd.project.parent_death import die_with_parent
from lowerd.project.process_threads import thread_count
from lowerd.project.wire import WireError, decode, encode, wire_shape

T = TypeVar("T")

# What a child runs: the request's bytes, and whether its zygote was forked from a process with
# threads (then the child puts ATen on one thread), to the answer's bytes.
Serve = Callable[[bytes, bool], bytes]


@wire_shape(tag="type")
@dataclass(frozen=True)
class ZygoteForked:
    """The zygote's first message, from the process that forked it: whether that process had
    threads besides the forking one (then its children put ATen on one thread)."""

    type: ClassVar[str] = "forked"

    threaded: bool


@wire_shape(tag="type")
@dataclass(frozen=True)
class ChildStarted:
    """The zygote forked the request's child: its pid (the worker kills it after a timeout),
    and how many threads the zygote had when it forked it (1: none but its own)."""

    type: ClassVar[str] = "started"

    pid: int
    threads: int


@wire_shape(tag="type")
@dataclass(frozen=True)
class ChildEnded:
    """The child ended: its exit status (the code, or minus the signal that ended it) and what
    it wrote on its pipe, whole only when the status is 0."""

    type: ClassVar[str] = "ended"

    pid: int
    status: int
    answer: bytes


class ZygoteGone(Exception):
    """The zygote ended (or was never reachable): the message says how."""


class RuntimeZygote:
    """The worker's end: one request at a time."""

    def __init__(self, pid: int, connection: Connection, threaded: bool):
        self.pid = pid
        self.threaded = threaded
        self._connection: Connection | None = connection
        self._owner = os.getpid()  # a fork of the owner has no zygote of its own

    @property
    def usable(self) -> bool:
        return self._connection is not None and self._owner == os.getpid()

    def run(self, request: bytes, timeout: float) -> ChildEnded | None:
        """The request run in a fresh child; None when the child did not end in `timeout`
        seconds (it is killed). ZygoteGone when the zygote ended."""
        connection = self._connection
        if connection is None:
            raise ZygoteGone("the runtime's zygote has ended")
        try:
            connection.send_bytes(request)
            started = _received(connection, ChildStarted)
            if not connection.poll(timeout):
                _kill(started.pid)
                _received(connection, ChildEnded)  # reaped
                return None
            return _received(connection, ChildEnded)
        except (EOFError, OSError) as error:  # it ended: its status says how
            raise ZygoteGone(self._ended(error, ended=True)) from error
        except (WireError, ValueError) as error:  # it says what it should not: end it
            raise ZygoteGone(self._ended(error, ended=False)) from error

    def stop(self) -> None:
        """Close the zygote's end and wait for it (it exits on the closed socket)."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        connection.close()
        if self._owner == os.getpid():
            _reap(self.pid)

    def _ended(self, error: BaseException, ended: bool) -> str:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
        unreachable = f"the runtime's zygote is unreachable ({type(error).__name__}: {error})"
        if not ended:
            _kill(self.pid)
            _reap(self.pid)
            return unreachable
        status = _reap(self.pid)
        if status is not None and status < 0:
            return f"the runtime's zygote died ({signal.Signals(-status).name})"
        if status is not None:
            return f"the runtime's zygote ended (exit code {status})"
        return unreachable


_zygote: RuntimeZygote | None = None


def start_zygote(serve: Serve, close: Sequence[int] = ()) -> RuntimeZygote:
    """Fork this process's zygote (once; later calls return it). `close`: the descriptors the
    zygote must not hold (the worker's event pipe, whose end the supervisor waits for)."""
    global _zygote
    if _zygote is not None and _zygote.usable:
        return _zygote
    ours, theirs = socket.socketpair()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the zygote
        try:
            ours.close()
            die_with_parent(signal.SIGKILL, parent)
            for fd in close:
                _close(fd)
            connection = Connection(theirs.detach())
            _serve(connection, serve, _received(connection, ZygoteForked).threaded)
        finally:
            os._exit(0)  # not the worker's exit handlers, nor its buffered output
    theirs.close()
    # Counted after the fork: a library's threads that its fork handler retires (OpenBLAS's)
    # were not running while it forked; a thread still here is one the fork left behind alive,
    # as OpenMP's pool is.
    threaded = thread_count() > 1
    connection = Connection(ours.detach())
    _send(connection, ZygoteForked(threaded))
    _zygote = RuntimeZygote(pid, connection, threaded)
    return _zygote


def zygote(serve: Serve) -> RuntimeZygote:
    """This process's zygote: the one it started, else one started now."""
    if _zygote is not None and _zygote.usable:
        return _zygote
    return start_zygote(serve)


def stop_zygote() -> None:
    """End this process's zygote, if it started one; a later request starts another."""
    global _zygote
    if _zygote is not None:
        _zygote.stop()
        _zygote = None


def _serve(connection: Connection, serve: Serve, threaded: bool) -> None:
    """The zygote's loop: a child per request, until the worker closes its end."""
    me = os.getpid()
    while True:
        try:
            request = connection.recv_bytes()
        except (EOFError, OSError):
            return
        reading, writing = os.pipe()
        threads = thread_count()
        pid = os.fork()
        if pid == 0:
            os.close(reading)
            _child(connection, serve, request, writing, me, threaded)
        os.close(writing)
        del request
        _send(connection, ChildStarted(pid, threads))
        with os.fdopen(reading, "rb") as pipe:
            answer = pipe.read()  # until the child ends, or is killed
        _, status = os.waitpid(pid, 0)
        _send(connection, ChildEnded(pid, os.waitstatus_to_exitcode(status), answer))


def _child(
    connection: Connection, serve: Serve, request: bytes, writing: int, zygote: int, threaded: bool
) -> None:
    code = 1
    try:
        connection.close()  # the zygote's channel is not the child's to answer on
        die_with_parent(signal.SIGKILL, zygote)
        answer = serve(request, threaded)
        with os.fdopen(writing, "wb") as pipe:
            pipe.write(answer)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _send(connection: Connection, message: ZygoteForked | ChildStarted | ChildEnded) -> None:
    connection.send_bytes(msgpack.packb(encode(message), use_bin_type=True))


def _received(connection: Connection, cls: type[T]) -> T:
    return decode(cls, msgpack.unpackb(connection.recv_bytes(), raw=False))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile: the zygote says how
        pass


def _reap(pid: int) -> int | None:
    """The zygote's exit status once it has ended (it is this process's child)."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return None
    return os.waitstatus_to_exitcode(status)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
