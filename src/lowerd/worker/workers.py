"""Warm, isolated build workers for the daemon.

The daemon never imports torch and never runs user code. A fork server (worker/forkserver.py)
imports torch and ExecuTorch once; each build is a fresh fork of it. A build that raises, crashes,
hangs past its timeout or runs out of memory ends only its own process: its result is an error
(`worker-crash`, `worker-timeout`, `cancelled`) and the next build starts from the warm server.
A fork server that dies is started again on the next build.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from lowerd.project.result import TargetResult
from lowerd.worker.entry_site import failed_at_entry
from lowerd.worker.frames import FrameError, read_frame_async
from lowerd.worker.kill import kill_worker
from lowerd.worker.libraries import environment_stamp
from lowerd.worker.protocol import (
    ExitedMessage,
    ForkServerMessage,
    LibrariesEvent,
    PreloadedMessage,
    PreloadRequest,
    ProtocolError,
    ReadyMessage,
    ResultEvent,
    StartedMessage,
    WorkerEvent,
    WorkerJob,
    parse_event,
    parse_fork_server_message,
)
from lowerd.worker.tasks import spawn

EventCallback = Callable[[WorkerEvent], None]
# Room for a preload message's module names: the fork server reads 64 KiB messages.
PRELOAD_MESSAGE_BYTES = 32 * 1024
# How long a worker's exit status may trail the end of its event pipe.
EXIT_STATUS_GRACE = 5.0
# How long a fork server that is serving may take to leave once its channel closes.
CLOSE_GRACE = 5.0


@dataclass(frozen=True)
class BuildRequest:
    config_path: str
    target: str
    timeout: float | None = None  # seconds
    memory_limit: int | None = None  # bytes of address space (RLIMIT_AS)
    use_cache: bool = True
    backends: tuple[str, ...] | None = None  # the editor's override of the config's backends
    # Where the outputs and build record go instead of the config's out_dir: a compare's
    # private folder (project/compare.py), never the target's real .pte.
    out_dir: str | None = None


@dataclass
class BuildHandle:
    build_id: int
    request: BuildRequest
    _result: asyncio.Future[TargetResult] = field(repr=False)
    _pool: WorkerPool = field(repr=False)
    pid: int | None = None
    ended_by: str | None = None  # "cancelled" or "worker-timeout" once the daemon killed it

    def cancel(self) -> None:
        self._pool._end(self, "cancelled")

    async def result(self) -> TargetResult:
        return await asyncio.shield(self._result)


class WorkerPool:
    def __init__(self, max_workers: int = 2, preload: tuple[str, ...] = ("xnnpack",)):
        self.max_workers = max_workers
        self.preload = preload
        self._ids = itertools.count(1)
        self._slots: asyncio.Semaphore | None = None
        self._server: _ForkServer | None = None
        self._starting: asyncio.Lock | None = None
        self._closed = False
        # Libraries whose import started a thread in the fork server: never preloaded again.
        self._cold: set[str] = set()

    async def start(self) -> None:
        try:
            await self._fork_server()
        except ConnectionError:
            if not self._closed:
                raise  # a warm-up that close() stopped is no failure

    def submit(self, request: BuildRequest, on_event: EventCallback) -> BuildHandle:
        loop = asyncio.get_running_loop()
        handle = BuildHandle(next(self._ids), request, loop.create_future(), self)
        spawn(self._run(handle, on_event))
        return handle

    async def close(self) -> None:
        """Stop the fork server, one still warming up included; none starts after this."""
        self._closed = True
        if self._server is not None:
            await self._server.close()
            self._server = None

    async def _fork_server(self) -> _ForkServer:
        if self._starting is None:
            self._starting = asyncio.Lock()
            self._slots = asyncio.Semaphore(self.max_workers)
        async with self._starting:
            if self._server is None or not self._server.usable:
                if self._server is not None:
                    self._cold.update(self._server.tainted_by, self._server.cold)
                    await self._server.close()
                if self._closed:
                    raise ConnectionError("the worker pool is closed")
                # Kept before it is ready, so that close() reaches one still warming up.
                self._server = _ForkServer.spawn(self.preload)
            server = self._server
        await server.ready()
        return server

    async def _run(self, handle: BuildHandle, on_event: EventCallback) -> None:
        try:
            result = await self._build(handle, on_event)
        except Exception as error:  # the daemon must outlive any failure of a build
            result = _failure(handle, "worker-crash", f"build worker failed: {error}")
        if not handle._result.done():
            handle._result.set_result(result)

    async def _build(self, handle: BuildHandle, on_event: EventCallback) -> TargetResult:
        server = await self._fork_server()
        assert self._slots is not None
        async with self._slots:
            if handle.ended_by:  # cancelled while queued
                return _failure(handle, handle.ended_by, "build cancelled before it started")
            read_end, write_end = os.pipe()
            try:
                started = server.fork(handle, write_end)
            finally:
                os.close(write_end)
            events, pipe = await _open_reader(read_end)

            def on_worker_event(event: WorkerEvent) -> None:
                if isinstance(event, LibrariesEvent):
                    cold = self._cold | server.cold
                    server.preload([m for m in event.modules if m not in cold])
                else:
                    on_event(event)

            try:
                message = await started
                if isinstance(message, StartedMessage):  # what `started` waits for
                    handle.pid = message.pid
                if handle.ended_by:  # cancelled while the fork was on its way
                    self._kill(handle)
                timer = self._arm_timeout(handle)
                try:
                    result = await _read_events(events, on_worker_event)
                finally:
                    if timer:
                        timer.cancel()
            finally:
                pipe.close()
            status = await server.exit_status(handle.build_id)
        if handle.ended_by:
            return _failure(handle, handle.ended_by, _ended_message(handle))
        if result is None:
            return _failure(handle, "worker-crash", _crash_message(handle, status))
        return result

    def _arm_timeout(self, handle: BuildHandle) -> asyncio.TimerHandle | None:
        if not handle.request.timeout:
            return None
        loop = asyncio.get_running_loop()
        return loop.call_later(handle.request.timeout, self._end, handle, "worker-timeout")

    def _end(self, handle: BuildHandle, reason: str) -> None:
        if handle.ended_by or handle._result.done():
            return
        handle.ended_by = reason
        if handle.pid is not None:
            self._kill(handle)

    @staticmethod
    def _kill(handle: BuildHandle) -> None:
        if handle.pid is not None:
            kill_worker(handle.pid)


class _ForkServer:
    """The daemon's side of one fork-server process."""

    def __init__(self, process: subprocess.Popen[bytes], channel: socket.socket):
        self.process = process
        self.channel = channel
        self.closed = False
        self.warm = False  # it said "ready": from then on it reads its channel
        # Answers awaited, by (op, build id): "started" and "exited" per build, "ready" once.
        self._waiting: dict[tuple[str, int], asyncio.Future[ForkServerMessage]] = {}
        self._exits: dict[int, int] = {}
        # worker/libraries.py: what it was asked to import, and what the environment was then.
        self.environment = environment_stamp()
        self.preloaded: set[str] = set()
        self.tainted_by: tuple[str, ...] = ()  # a preload that started a thread: forks unsafe
        self.cold: set[str] = set()  # libraries its probe found to start a thread: never preloaded
        self._last_preload: tuple[str, ...] = ()
        self._ready = self._expect("ready", 0)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    def spawn(cls, preload: tuple[str, ...]) -> _ForkServer:
        """Start the process; it warms up (imports torch, lowers once) until ready() returns.

        Called on the event loop's thread, which lives as long as the daemon: the fork server's
        parent-death signal fires when the thread that started it ends (forkserver.py).
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = [sys.executable, "-m", "lowerd.worker.forkserver", "--fd", str(theirs.fileno())]
        try:
            process = subprocess.Popen(
                [*command, "--preload", ",".join(preload), "--parent", str(os.getpid())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=sys.stderr.fileno(),  # user prints must never reach an LSP client on stdout
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return cls(process, ours)

    async def ready(self) -> None:
        """Returns once it is warm; ConnectionError if it ended first. Cancelling one waiter
        leaves the warm-up to the others."""
        await asyncio.shield(self._ready)

    @property
    def alive(self) -> bool:
        return not self.closed and self.process.poll() is None

    @property
    def usable(self) -> bool:
        """Alive, safe to fork, and warm with libraries that are still the installed ones."""
        return self.alive and not self.tainted_by and self.environment == environment_stamp()

    def preload(self, modules: list[str]) -> None:
        """Have it import these installed libraries between builds (worker/libraries.py)."""
        new = [m for m in modules if m not in self.preloaded]
        if not new or not self.warm or self.closed:
            return
        self.preloaded.update(new)
        self._last_preload = tuple(new)
        for chunk in _chunks(new, PRELOAD_MESSAGE_BYTES):
            try:
                self.channel.send(msgpack.packb(PreloadRequest(tuple(chunk)).to_frame()))
            except OSError:  # its queue is full or it is gone: those stay cold, nothing breaks
                return

    def fork(self, handle: BuildHandle, write_end: int) -> asyncio.Future[ForkServerMessage]:
        """Asks for the build's worker; the future is its "started" message, with the pid."""
        request = handle.request
        job = WorkerJob(
            config=request.config_path,
            target=request.target,
            id=handle.build_id,
            memory_limit=request.memory_limit,
            use_cache=request.use_cache,
            backends=request.backends,
            warm_libraries=True,
            out_dir=request.out_dir,
        )
        started = self._expect("started", handle.build_id)
        message = msgpack.packb(job.to_frame(), use_bin_type=True)
        socket.send_fds(self.channel, [message], [write_end])
        return started

    async def exit_status(self, build_id: int) -> int | None:
        if build_id in self._exits:
            return self._exits.pop(build_id)
        waiting = self._expect("exited", build_id)
        try:
            await asyncio.wait_for(asyncio.shield(waiting), EXIT_STATUS_GRACE)
        except TimeoutError:
            return None
        return self._exits.pop(build_id, None)

    async def close(self) -> None:
        self.closed = True
        self.channel.close()
        self._reader.cancel()
        if not self.warm:
            # Warming up, it reads no channel: it would notice the close only after seconds of
            # imports, as an orphan if the daemon is leaving. It has no workers yet to take along.
            self.process.kill()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.process.wait), CLOSE_GRACE)
        except TimeoutError:
            self.process.kill()
            await asyncio.to_thread(self.process.wait)

    def _expect(self, op: str, build_id: int) -> asyncio.Future[ForkServerMessage]:
        future: asyncio.Future[ForkServerMessage] = asyncio.get_running_loop().create_future()
        # An answer nobody awaits any more (the server died first) must not log an error.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._waiting[(op, build_id)] = future
        return future

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await loop.sock_recv(self.channel, 65536)
                if not data:
                    break
                message = parse_fork_server_message(msgpack.unpackb(data, raw=False))
                if isinstance(message, ReadyMessage):
                    self.warm = True
                elif isinstance(message, ExitedMessage):
                    self._exits[message.id] = message.status
                elif isinstance(message, PreloadedMessage):
                    self.cold.update(message.cold)
                    if message.tainted:
                        self.tainted_by = self._last_preload
                waiting = self._waiting.pop((message.op, message.id), None)
                if waiting and not waiting.done():
                    waiting.set_result(message)
        # A message it never sends: its channel is not to be trusted, as if it had ended.
        except (OSError, ProtocolError, ValueError, asyncio.CancelledError):
            pass
        finally:
            self.closed = True
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(ConnectionError("the fork server exited"))
            self._waiting.clear()


def _chunks(names: list[str], max_bytes: int) -> list[list[str]]:
    """Names in lists whose messages fit the fork server's receive size."""
    chunks: list[list[str]] = [[]]
    size = 0
    for name in names:
        if chunks[-1] and size + len(name) + 8 > max_bytes:
            chunks.append([])
            size = 0
        chunks[-1].append(name)
        size += len(name) + 8
    return chunks


async def _open_reader(read_end: int) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb", buffering=0)
    )
    return reader, transport


async def _read_events(
    events: asyncio.StreamReader, on_event: EventCallback
) -> TargetResult | None:
    """Forward the worker's events; its result, or None if the pipe ended without one (or with
    something that is no event: the worker's output is then not to be trusted)."""
    while True:
        try:
            message = await read_frame_async(events)
            if message is None:
                return None
            event = parse_event(message)
        except (FrameError, ProtocolError):
            return None
        if isinstance(event, ResultEvent):
            return event.result
        try:
            on_event(event)
        except Exception:  # a failing listener must not lose the build's result
            pass


def _failure(handle: BuildHandle, kind: str, message: str) -> TargetResult:
    if kind == "cancelled":  # superseded, not the project's fault: nothing to point at
        return TargetResult.failed(handle.request.target, kind, message)
    return failed_at_entry(Path(handle.request.config_path), handle.request.target, kind, message)


def _ended_message(handle: BuildHandle) -> str:
    if handle.ended_by == "worker-timeout" and handle.request.timeout:
        return timeout_message(handle.request.timeout)
    return "the build was cancelled"


def timeout_message(seconds: float) -> str:
    """Also the in-process `lowerd build`'s, whose workers have the config's timeout too."""
    return f"the build did not finish within {seconds:g} s and was stopped"


def _crash_message(handle: BuildHandle, status: int | None) -> str:
    return exit_message(status, handle.request.memory_limit)


def exit_message(status: int | None, limit: int | None = None) -> str:
    """Why a build worker that sent no result ended, from its wait() status (None: unknown).
    Also the in-process `lowerd build`'s, whose workers are forks too."""
    memory = f" (memory limit {limit // 2**20} MiB)" if limit else ""
    if status is None:
        return "the build worker ended without a result"
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"the build worker was killed by {name}{memory}"
    return f"the build worker exited with code {os.WEXITSTATUS(status)} before finishing{memory}"
