"""The one supervisor of build workers: every build, wherever it was asked for, runs here.

The daemon (its client batches, compares and editor builds), the in-process `lowerd build` and
`lowerd compare`, and the Ray task submit WorkerJobs (worker/protocol.py) to a WorkerPool. For
each, the pool starts a forked worker through its launcher, reads the worker's event frames off
a pipe, forwards them, enforces the job's timeout, kills the worker and what it started when the
build is cancelled or timed out, and keeps the peak RSS the worker reported (which the worker
also writes into the target's build record). A build that crashes, hangs past its timeout or
runs out of memory ends only its own process: its result is an error (`worker-crash`,
`worker-timeout`, `cancelled`) at the target's entry function, found without running user code.

Two launchers start the workers: the daemon's forks of a warm fork server
(worker/fork_server_client.py), since the daemon never imports torch; and forks of this very
process for the CLI and the Ray task, which imported the engine themselves
(worker/local_builds.py, which also runs the pool to completion for its synchronous callers).
Nothing here imports torch: the fork server and the forked workers import the engine.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import resource
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from lowerd.project.result import TargetResult
from lowerd.worker.entry_site import failed_at_entry
from lowerd.worker.fork_server_client import ForkServerLauncher
from lowerd.worker.frames import FrameError, read_frame_async
from lowerd.worker.kill import kill_worker
from lowerd.worker.protocol import (
    ExitedMessage,
    LibrariesEvent,
    PeakRssEvent,
    ProtocolError,
    ResultEvent,
    WorkerEvent,
    WorkerJob,
    parse_event,
)
from lowerd.worker.tasks import spawn

EventCallback = Callable[[WorkerEvent], None]


class Forker(Protocol):
    """Starts a build's worker and says how it ended: a warm fork server, or this process."""

    async def fork(self, job: WorkerJob, events: int) -> int:
        """Fork the job's worker, which writes its event frames to the fd `events`; its pid."""
        ...

    async def exit_status(self, job: WorkerJob, pid: int | None) -> ExitedMessage | None:
        """How the worker ended (its wait() status, its CPU time) once its event pipe ended;
        None when it cannot be had."""
        ...

    def imported(self, modules: Sequence[str]) -> None:
        """The worker's build imported these installed libraries (a LibrariesEvent)."""
        ...


class Launcher(Protocol):
    async def forker(self) -> Forker:
        """What starts the next worker, ready to; ConnectionError when none can be had."""
        ...

    async def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


@dataclass(eq=False)  # a build is itself: handles hash by identity
class BuildHandle:
    build_id: int
    job: WorkerJob
    _result: asyncio.Future[TargetResult] = field(repr=False)
    _pool: WorkerPool = field(repr=False)
    pid: int | None = None
    ended_by: str | None = None  # "cancelled" or "worker-timeout" once the pool killed it
    peak_rss: int | None = None  # bytes, as its worker reported them before its result

    def cancel(self) -> None:
        self._pool._end(self, "cancelled")

    async def result(self) -> TargetResult:
        return await asyncio.shield(self._result)


class WorkerPool:
    """Runs up to `max_workers` builds at once, in the order submitted; the rest wait."""

    def __init__(
        self,
        max_workers: int = 2,
        preload: tuple[str, ...] = ("xnnpack",),
        launcher: Launcher | None = None,
    ):
        self.max_workers = max_workers
        # The daemon's by default: forks of a warm fork server that preloads `preload`.
        self.launcher = launcher or ForkServerLauncher(preload)
        self._ids = itertools.count(1)
        self._slots = asyncio.Semaphore(max_workers)
        self._running: dict[BuildHandle, asyncio.Task[None]] = {}

    async def start(self) -> None:
        """Warm up ahead of the first build (the fork server imports torch meanwhile)."""
        try:
            await self.launcher.forker()
        except ConnectionError:
            if not self.launcher.closed:
                raise  # a warm-up that close() stopped is no failure

    def submit(self, job: WorkerJob, on_event: EventCallback) -> BuildHandle:
        loop = asyncio.get_running_loop()
        handle = BuildHandle(next(self._ids), job, loop.create_future(), self)
        task = spawn(self._run(handle, on_event))
        self._running[handle] = task
        task.add_done_callback(lambda _: self._running.pop(handle, None))
        return handle

    async def cancel_all(self) -> None:
        """Cancel every build not yet ended, and return once each has: its worker killed and
        its end taken in."""
        running = dict(self._running)
        for handle in running:
            handle.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)

    async def close(self) -> None:
        """Stop the launcher (the fork server, one still warming up included); no worker
        starts after this."""
        await self.launcher.close()

    async def _run(self, handle: BuildHandle, on_event: EventCallback) -> None:
        try:
            result = await self._build(handle, on_event)
        except Exception as error:  # the daemon must outlive any failure of a build
            result = _failure(handle, "worker-crash", f"build worker failed: {error}")
        if not handle._result.done():
            handle._result.set_result(result)

    async def _build(self, handle: BuildHandle, on_event: EventCallback) -> TargetResult:
        forker = await self.launcher.forker()
        async with self._slots:
            if handle.ended_by:  # cancelled while queued
                return _failure(handle, handle.ended_by, "build cancelled before it started")
            job = replace(handle.job, id=handle.build_id)
            result = await self._supervise(handle, job, forker, _listener(handle, forker, on_event))
            ended = await forker.exit_status(job, handle.pid)
        if handle.ended_by:
            return _failure(handle, handle.ended_by, _ended_message(handle))
        if result is None:
            return _failure(handle, *exit_message(ended, job.memory_limit, cpu_limit()))
        return result

    async def _supervise(
        self, handle: BuildHandle, job: WorkerJob, forker: Forker, on_event: EventCallback
    ) -> TargetResult | None:
        """Start the worker and read its events until its pipe ends, within its timeout; its
        result, or None if it sent none (or something that is no event)."""
        read_end, write_end = os.pipe()
        try:
            handle.pid = await forker.fork(job, write_end)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the worker's alone: its end of the pipe closes when it ends
        events, pipe = await _open_reader(read_end)
        try:
            if handle.ended_by:  # cancelled while the fork was on its way
                self._kill(handle)
            timer = self._arm_timeout(handle)
            try:
                return await _read_events(events, on_event)
            finally:
                if timer:
                    timer.cancel()
        finally:
            pipe.close()

    def _arm_timeout(self, handle: BuildHandle) -> asyncio.TimerHandle | None:
        if not handle.job.timeout:
            return None
        loop = asyncio.get_running_loop()
        return loop.call_later(handle.job.timeout, self._end, handle, "worker-timeout")

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


def _listener(handle: BuildHandle, forker: Forker, on_event: EventCallback) -> EventCallback:
    """What the pool takes from a worker's events itself, before the caller gets the rest."""

    def on_worker_event(event: WorkerEvent) -> None:
        if isinstance(event, LibrariesEvent):
            forker.imported(event.modules)
            return
        if isinstance(event, PeakRssEvent):
            handle.peak_rss = event.bytes
        on_event(event)

    return on_worker_event


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
        return TargetResult.failed(handle.job.target, kind, message)
    return failed_at_entry(Path(handle.job.config), handle.job.target, kind, message)


def _ended_message(handle: BuildHandle) -> str:
    if handle.ended_by == "worker-timeout" and handle.job.timeout:
        return f"the build did not finish within {handle.job.timeout:g} s and was stopped"
    return "the build was cancelled"


# wait4()'s user and system times are sampled, short of the exact runtime the kernel's limit
# counts: a worker it killed at a 25 s CPU limit reported 24.7 s, one at 1 s reported 0.85 s on
# a loaded machine and 0.99 s on a quiet one (measured). So a kill within 5 % or half a second of
# the limit is the limit's.
_CPU_TIME_SAMPLED = 0.95
_CPU_TIME_SLACK = 0.5


def exit_message(
    ended: ExitedMessage | None, limit: int | None = None, cpu_seconds: int | None = None
) -> tuple[str, str]:
    """The kind and the words of why a build worker that sent no result ended, from its wait()
    status (None: unknown). One the kernel killed at its CPU time limit (`cpu_seconds`: the
    RLIMIT_CPU the worker has from this process, `ulimit -t`) ran out of time: a
    worker-timeout, said as one."""
    memory = f" (memory limit {limit // 2**20} MiB)" if limit else ""
    if ended is None:
        return "worker-crash", "the build worker ended without a result"
    status = ended.status
    if not os.WIFSIGNALED(status):
        code = os.WEXITSTATUS(status)
        return "worker-crash", f"the build worker exited with code {code} before finishing{memory}"
    name = signal.Signals(os.WTERMSIG(status)).name
    used = ended.cpu_seconds or 0.0
    if name in ("SIGKILL", "SIGXCPU") and cpu_seconds and used >= _cpu_time_reached(cpu_seconds):
        return "worker-timeout", (
            f"the build worker used its CPU time limit ({cpu_seconds} s of CPU, RLIMIT_CPU: "
            f"`ulimit -t`) and was killed by {name}"
        )
    return "worker-crash", f"the build worker was killed by {name}{memory}"


def _cpu_time_reached(cpu_seconds: int) -> float:
    """The least wait4() CPU time of a process the kernel killed at `cpu_seconds` of CPU."""
    return min(cpu_seconds * _CPU_TIME_SAMPLED, cpu_seconds - _CPU_TIME_SLACK)


def cpu_limit() -> int | None:
    """The CPU seconds a process may use (the soft RLIMIT_CPU), None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_CPU)
    return None if soft == resource.RLIM_INFINITY else soft
