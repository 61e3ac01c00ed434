"""The daemon's way to start build workers: forks of a warm fork server (worker/forkserver.py).

The daemon never imports torch and never runs user code. The fork server, its own process,
imports torch and ExecuTorch once; each build is a fresh fork of it, asked for over its channel
(worker/protocol.py). A fork server that died, or that a preloaded library made unsafe to fork,
or that is warm with libraries no longer installed, is replaced on the next build. The one
supervisor (worker/workers.py WorkerPool) runs the builds; this module only starts its workers
and says how they ended.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace

import msgpack

from lowerd.project.hash_seed import pinned
from lowerd.project.wire import encode
from lowerd.worker.libraries import environment_stamp
from lowerd.worker.protocol import (
    ExitedMessage,
    ForkServerMessage,
    PreloadedMessage,
    PreloadRequest,
    ProtocolError,
    ReadyMessage,
    StartedMessage,
    WorkerJob,
    parse_fork_server_message,
)

# Room for a preload message's module names: the fork server reads 64 KiB messages.
PRELOAD_MESSAGE_BYTES = 32 * 1024
# How long a worker's exit status may trail the end of its event pipe.
EXIT_STATUS_GRACE = 5.0
# How long a fork server that is serving may take to leave once its channel closes.
CLOSE_GRACE = 5.0


class ForkServerLauncher:
    """Keeps one usable fork server: started on first use, replaced when it is no longer fit."""

    def __init__(self, preload: tuple[str, ...] = ("xnnpack",)):
        self.preload = preload
        self._server: ForkServer | None = None
        self._starting = asyncio.Lock()
        self._closed = False
        # Libraries whose import started a thread in a fork server: never preloaded again.
        self._cold: set[str] = set()

    async def forker(self) -> ForkServer:
        """The warm fork server; ConnectionError if it ended while warming, or once closed."""
        async with self._starting:
            if self._server is None or not self._server.usable:
                if self._server is not None:
                    self._cold.update(self._server.tainted_by, self._server.cold)
                    await self._server.close()
                if self._closed:
                    raise ConnectionError("the worker pool is closed")
                # Kept before it is ready, so that close() reaches one still warming up.
                self._server = ForkServer.spawn(self.preload, self._cold)
            server = self._server
        await server.ready()
        return server

    async def close(self) -> None:
        """Stop the fork server, one still warming up included; none starts after this."""
        self._closed = True
        if self._server is not None:
            await self._server.close()
            self._server = None

    @property
    def closed(self) -> bool:
        return self._closed


class ForkServer:
    """The daemon's side of one fork-server process."""

    def __init__(self, process: subprocess.Popen[bytes], channel: socket.socket, cold: set[str]):
        self.process = process
        self.channel = channel
        self.closed = False
        self.warm = False  # it said "ready": from then on it reads its channel
        # Answers awaited, by (op, build id): "started" and "exited" per build, "ready" once.
        self._waiting: dict[tuple[str, int], asyncio.Future[ForkServerMessage]] = {}
        self._exits: dict[int, ExitedMessage] = {}
        # worker/libraries.py: what it was asked to import, and what the environment was then.
        self.environment = environment_stamp()
        self.preloaded: set[str] = set()
        self.tainted_by: tuple[str, ...] = ()  # a preload that started a thread: forks unsafe
        self.cold: set[str] = set()  # libraries its probe found to start a thread: never preloaded
        self._never = cold  # the launcher's: those earlier fork servers found to start a thread
        self._last_preload: tuple[str, ...] = ()
        self._ready = self._expect("ready", 0)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    def spawn(cls, preload: tuple[str, ...], cold: set[str]) -> ForkServer:
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
                env=pinned(os.environ),  # its lowerings' bytes must not depend on the daemon's seed
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return cls(process, ours, cold)

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

    async def fork(self, job: WorkerJob, events: int) -> int:
        """Has it fork the job's worker, which writes its events to `events`; the worker's pid,
        once the server says it started. ConnectionError if the server ended first."""
        job = replace(job, warm_libraries=True)  # it reports what it imported: see imported()
        started = self._expect("started", job.id)
        message = msgpack.packb(encode(job), use_bin_type=True)
        socket.send_fds(self.channel, [message], [events])
        answer = await started
        assert isinstance(answer, StartedMessage)  # what "started" answers
        return answer.pid

    async def exit_status(self, job: WorkerJob, pid: int | None) -> ExitedMessage | None:
        """How the worker ended, as the fork server that reaped it says; None if it says
        nothing in time."""
        if job.id in self._exits:
            return self._exits.pop(job.id)
        waiting = self._expect("exited", job.id)
        try:
            await asyncio.wait_for(asyncio.shield(waiting), EXIT_STATUS_GRACE)
        except TimeoutError:
            return None
        return self._exits.pop(job.id, None)

    def imported(self, modules: Sequence[str]) -> None:
        """A build imported these installed libraries: have the server import them between
        builds (worker/libraries.py), but for those known to start a thread."""
        cold = self._never | self.cold
        new = [m for m in modules if m not in self.preloaded and m not in cold]
        if not new or not self.warm or self.closed:
            return
        self.preloaded.update(new)
        self._last_preload = tuple(new)
        for chunk in _chunks(new, PRELOAD_MESSAGE_BYTES):
            try:
                self.channel.send(msgpack.packb(encode(PreloadRequest(tuple(chunk)))))
            except OSError:  # its queue is full or it is gone: those stay cold, nothing breaks
                return

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
                    self._exits[message.id] = message
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
