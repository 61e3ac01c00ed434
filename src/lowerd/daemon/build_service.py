"""The daemon's side of `lowerd build`: a client's batch, built through the warm workers.

The same steps as the in-process build, from the same code (lowerd.project.batch): up-to-date
targets are answered here without torch and without a worker, the others are built in worker
processes, up to `jobs` at once and only while memory allows, and the client gets the same JSON
document and exit code an in-process build would have printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowerd.daemon.rpc_messages import PeakInfo, ProgressFrame, RunningBuildInfo
from lowerd.project.batch import Batch, Outcome
from lowerd.project.config import TargetConfig
from lowerd.project.result import TargetResult
from lowerd.worker.protocol import ProgressEvent, WorkerEvent, WorkerJob
from lowerd.worker.workers import BuildHandle, WorkerPool

# What a build request streams to its client while it runs (daemon/rpc_messages.py).
Frame = ProgressFrame
SendFrame = Callable[[Frame], None]
TargetKey = tuple[str, str]  # (config path, target name)

# How often a batch held back for memory looks again while only other clients' builds run.
MEMORY_POLL_SECONDS = 0.5
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class RunningBuild:
    handle: BuildHandle
    started: float


class BuildService:
    def __init__(self, pool: WorkerPool):
        self.pool = pool
        # A target's peak RSS in its last build, reported by its worker: what it will need again.
        self.peak_rss: dict[TargetKey, int] = {}
        self.running: dict[int, RunningBuild] = {}  # build id -> the worker build
        self._admitted = 0  # builds admitted and not yet finished, for every client
        # Two clients building one target take turns: the second then finds it up to date.
        self._target_locks: dict[TargetKey, asyncio.Lock] = {}

    async def build(
        self,
        config_path: str,
        target_names: Sequence[str],
        use_cache: bool,
        jobs: int,
        send: SendFrame,
    ) -> tuple[dict[str, Any], Outcome]:
        """The document and how the build ended; ConfigError when the config or a target name
        is wrong.

        Cancelling it (the client went away) cancels its builds: their workers are killed.
        """
        batch = await asyncio.to_thread(Batch.load, Path(config_path), target_names, use_cache)
        await asyncio.to_thread(batch.answer_up_to_date)
        await self._build_stale(batch, max(1, jobs), send)
        return await asyncio.to_thread(batch.outcome)

    def builds(self) -> list[RunningBuildInfo]:
        now = time.monotonic()
        return [
            RunningBuildInfo(
                target=build.handle.job.target,
                config=build.handle.job.config,
                pid=build.handle.pid,
                seconds=round(now - build.started, 1),
            )
            for build in self.running.values()
        ]

    def peaks(self) -> list[PeakInfo]:
        """Each target's peak RSS in its last build: what admission reckons it will need."""
        return [
            PeakInfo(config, target, peak)
            for (config, target), peak in sorted(self.peak_rss.items())
        ]

    async def _build_stale(self, batch: Batch, jobs: int, send: SendFrame) -> None:
        pending = batch.stale
        running: dict[asyncio.Task[TargetResult], str] = {}
        try:
            while pending or running:
                while pending and len(running) < jobs and self._memory_admits(batch, pending[0]):
                    target = pending.pop(0)
                    self._admitted += 1
                    task = asyncio.create_task(self._build_target(batch, target, send))
                    running[task] = target.name
                if not running:  # held back: only other clients' builds are running
                    await asyncio.sleep(MEMORY_POLL_SECONDS)
                    continue
                # While something waits for memory, look again now and then: builds of other
                # clients may have ended in the meantime.
                timeout = MEMORY_POLL_SECONDS if pending else None
                done, _ = await asyncio.wait(
                    running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    name = running.pop(task)
                    self._admitted -= 1
                    batch.results[name] = task.result()
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            self._admitted -= len(running)

    def _memory_admits(self, batch: Batch, target: TargetConfig) -> bool:
        """A build always starts when none runs; next to others, only if its last peak fits."""
        peak = self.peak_rss.get((str(batch.config.path), target.name))
        if peak is None or self._admitted == 0:
            return True
        available = mem_available()
        return available is None or available >= peak

    async def _build_target(
        self, batch: Batch, target: TargetConfig, send: SendFrame
    ) -> TargetResult:
        key = (str(batch.config.path), target.name)
        lock = self._target_locks.setdefault(key, asyncio.Lock())
        waited = lock.locked()
        async with lock:
            if waited:  # another client's build of it just ended: it may be up to date now
                answer = await asyncio.to_thread(batch.up_to_date, target)
                if answer is not None:
                    return answer
            job = WorkerJob(
                str(batch.config.path),
                target.name,
                timeout=batch.config.timeout,
                use_cache=batch.use_cache,
            )
            handle = self.pool.submit(job, lambda event: _send_progress(target, event, send))
            self.running[handle.build_id] = RunningBuild(handle, time.monotonic())
            try:
                result = await handle.result()
            except asyncio.CancelledError:
                handle.cancel()
                raise
            finally:
                del self.running[handle.build_id]
            if handle.peak_rss:  # the worker kept it in the target's record too
                self.peak_rss[key] = handle.peak_rss
            return result


def _send_progress(target: TargetConfig, event: WorkerEvent, send: SendFrame) -> None:
    if isinstance(event, ProgressEvent):
        send(ProgressFrame(target.name, event.stage, event.detail))


def mem_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes; None where there is no such file."""
    try:
        with MEMINFO.open() as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
