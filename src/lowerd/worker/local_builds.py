"""Builds in workers forked from this very process: the in-process `lowerd build` and
`lowerd compare`, and the Ray task (cli/ray_task.py).

The process imports torch and ExecuTorch once (import_build_modules); each target's user code
then runs in a fork of it, so a model that calls os._exit or crashes ends only its worker. The
builds run through the one supervisor (worker/workers.py WorkerPool), on an asyncio loop of
their own, with LocalForks as its launcher: the same event frames, timeout, kill and error at
the entry function as the daemon's builds.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Callable, Mapping, Sequence

from lowerd.cache.store import BlobStore
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.result import TargetResult
from lowerd.worker.kill import kill_worker
from lowerd.worker.protocol import ExitedMessage, ProgressEvent, WorkerEvent, WorkerJob
from lowerd.worker.workers import WorkerPool

# (stage, key, detail): a build's progress, named by its key (cli/build_output.py ProgressLine).
Progress = Callable[[str, str, str | None], None]
# How long a worker may take to exit once its event pipe ended, and how often that is looked at.
EXIT_GRACE = 5.0
EXIT_POLL = 0.02


def import_build_modules(store: BlobStore | None) -> None:
    """The engine, imported once here and inherited by every worker forked from this process."""
    from lowerd.worker.preload import import_engine

    import_engine(store)
    gc.collect()
    gc.freeze()  # torch's and ExecuTorch's objects never die: spare every collection the scan


def kept_before_import(config: ProjectConfig, target: TargetConfig) -> TargetResult | None:
    """The target's last .pte kept when only comments and layout changed, decided before the
    engine is imported and without running the user's code (lowering/token_keep.py, which
    imports no torch); None when a build must decide."""
    from lowerd.lowering.token_keep import kept_before_import as keep

    return keep(config, target)


def local_job(
    config: ProjectConfig,
    target: TargetConfig,
    use_cache: bool,
    backends: tuple[str, ...] | None = None,
) -> WorkerJob:
    """The job for a target of `config`, with its timeout, writing the out_dir this config has
    (a Ray task's own folder, a compare's private one): the worker reads the file again."""
    return WorkerJob(
        str(config.path),
        target.name,
        timeout=config.timeout,
        use_cache=use_cache,
        backends=backends,
        out_dir=str(config.out_dir),
    )


def build_in_workers(
    jobs: Mapping[str, WorkerJob], max_workers: int, progress: Progress | None = None
) -> dict[str, TargetResult]:
    """Each job's result by its key, each built in a worker forked from this process, up to
    `max_workers` at once, in order. On Ctrl-C the running workers are killed (they lead their
    own process groups, out of its reach) and KeyboardInterrupt is raised."""
    return asyncio.run(_build_all(jobs, max_workers, progress))


async def _build_all(
    jobs: Mapping[str, WorkerJob], max_workers: int, progress: Progress | None
) -> dict[str, TargetResult]:
    pool = WorkerPool(max_workers, launcher=LocalForks())
    handles = {key: pool.submit(job, _progress_of(key, progress)) for key, job in jobs.items()}
    try:
        return {key: await handle.result() for key, handle in handles.items()}
    finally:  # interrupted (asyncio.run cancels this on Ctrl-C): no worker outlives the command
        await pool.cancel_all()


def _progress_of(key: str, progress: Progress | None) -> Callable[[WorkerEvent], None]:
    def on_event(event: WorkerEvent) -> None:
        if progress is not None and isinstance(event, ProgressEvent):
            progress(event.stage, key, event.detail)

    return on_event


class LocalForks:
    """The pool's launcher and forker in a process that imported the engine: each worker is a
    fork of it (worker/forkserver.py fork_worker, as the fork server makes its own)."""

    closed = False

    async def forker(self) -> LocalForks:
        return self

    async def close(self) -> None:
        pass

    async def fork(self, job: WorkerJob, events: int) -> int:
        from lowerd.worker.forkserver import fork_worker

        return fork_worker(job, events)

    async def exit_status(self, job: WorkerJob, pid: int | None) -> ExitedMessage | None:
        """How it ended; a worker that lingers past its pipe's end is killed (None)."""
        if pid is None:
            return None
        deadline = asyncio.get_running_loop().time() + EXIT_GRACE
        while asyncio.get_running_loop().time() < deadline:
            ended, status, usage = os.wait4(pid, os.WNOHANG)
            if ended:
                return ExitedMessage.reaped(job.id, status, usage)
            await asyncio.sleep(EXIT_POLL)
        kill_worker(pid)
        os.waitpid(pid, 0)
        return None

    def imported(self, modules: Sequence[str]) -> None:
        """Nothing to keep warm: this process builds one batch and ends."""
