"""`lowerd build` in-process: each stale target builds in a fork of this process.

This process imports torch and ExecuTorch once; each target's user code then runs in a forked
worker (the daemon's: worker/forkserver.py `fork_worker`), so a model that calls os._exit or
crashes ends only its worker. Its events and result come back as msgpack frames on a pipe, never
pickle; a worker that ends without a result is a `worker-crash` at the target's entry function.
`--jobs N` runs up to N workers at once.
"""

from __future__ import annotations

import gc
import os
import selectors
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from lowerd.cache.store import BlobStore
from lowerd.cli.build_output import ProgressLine, print_outcome, progress_printer
from lowerd.cli.exit_codes import exit_code
from lowerd.cli.report_table import ReportView
from lowerd.project.batch import Batch
from lowerd.project.build_state import remember_peak_rss
from lowerd.project.config import ProjectConfig, TargetConfig, choose_config
from lowerd.project.project_store import store_for
from lowerd.project.result import TargetResult
from lowerd.worker.frames import FrameError, take_frame
from lowerd.worker.kill import kill_worker
from lowerd.worker.protocol import (
    PeakRssEvent,
    ProgressEvent,
    ProtocolError,
    ResultEvent,
    WorkerJob,
    parse_event,
)


def run_build(
    config_path: str | None,
    target_names: Sequence[str],
    as_json: bool,
    use_cache: bool,
    jobs: int,
    view: ReportView | None = None,
) -> int:
    started = time.perf_counter()
    path = choose_config(config_path)
    batch = Batch.load(path, target_names, use_cache)
    batch.answer_up_to_date()
    if batch.stale:
        import_build_modules(store_for(batch.config) if use_cache else None)
        progress = progress_printer()
        try:
            built = build_in_workers(batch.config, batch.stale, use_cache, jobs, progress)
            batch.results.update(built)
        finally:
            if progress:
                progress.clear()
    document, outcome = batch.outcome()
    print_outcome(document, as_json, time.perf_counter() - started, view)
    return exit_code(outcome)


def import_build_modules(store: BlobStore | None) -> None:
    """Imported once here, inherited by every worker."""
    from lowerd.worker.preload import import_engine

    import_engine(store)
    gc.collect()
    gc.freeze()  # torch's and ExecuTorch's objects never die: spare every collection the scan


def build_in_workers(
    config: ProjectConfig,
    targets: Sequence[TargetConfig],
    use_cache: bool,
    jobs: int,
    progress: ProgressLine | None = None,
) -> dict[str, TargetResult]:
    """Each target's result, built in a forked worker, up to `jobs` at once."""
    builds = [WorkerBuild(target.name, config, target) for target in targets]
    return run_worker_builds(builds, use_cache, jobs, progress)


@dataclass(frozen=True)
class WorkerBuild:
    """One build for a forked worker: `key` names its result (and its progress line); `config`
    is the one it builds under, whose out_dir it writes; `backends` override the config file's
    (a compare's, cli/compare_command.py: the worker reads the file again)."""

    key: str
    config: ProjectConfig
    target: TargetConfig
    backends: tuple[str, ...] | None = None


def run_worker_builds(
    builds: Sequence[WorkerBuild],
    use_cache: bool,
    jobs: int,
    progress: ProgressLine | None = None,
) -> dict[str, TargetResult]:
    """Each build's result by its key, built in a forked worker, up to `jobs` at once."""
    waiting = deque(builds)
    running: dict[int, _Worker] = {}  # event pipe -> its worker
    results: dict[str, TargetResult] = {}
    with selectors.DefaultSelector() as selector:
        try:
            while waiting or running:
                while waiting and len(running) < jobs:
                    build = waiting.popleft()
                    try:
                        worker = _Worker.fork(build, use_cache)
                    except OSError as error:  # no process to be had (EAGAIN, ENOMEM)
                        message = f"no build worker could be started: {error}"
                        failed = TargetResult.failed(build.target.name, "worker-crash", message)
                        results[build.key] = failed
                        continue
                    running[worker.events] = worker
                    selector.register(worker.events, selectors.EVENT_READ)
                for key, _ in selector.select(_until_first_deadline(running.values())):
                    worker = running[key.fd]
                    if not worker.read(progress):
                        selector.unregister(key.fd)
                        del running[key.fd]
                        results[worker.build.key] = worker.finish()
                for worker in [w for w in running.values() if w.past_deadline()]:
                    selector.unregister(worker.events)
                    del running[worker.events]
                    results[worker.build.key] = worker.stop_at_timeout()
        finally:  # interrupted: the workers lead their own process groups, out of Ctrl-C's reach
            for worker in running.values():
                worker.kill()
    return results


@dataclass
class _Worker:
    build: WorkerBuild
    pid: int
    events: int  # the read end of its event pipe
    received: bytearray = field(default_factory=bytearray)
    result: TargetResult | None = None
    garbled: bool = False  # it wrote something that is not a frame: nothing after it counts
    timeout: float | None = None  # seconds, [tool.lowerd] timeout, as the daemon's workers have
    deadline: float | None = None  # time.monotonic() past which it is stopped
    peak_rss: int | None = None  # bytes, as it reported them before its result

    @property
    def target(self) -> TargetConfig:
        return self.build.target

    @classmethod
    def fork(cls, build: WorkerBuild, use_cache: bool) -> _Worker:
        from lowerd.worker.forkserver import fork_worker

        config = build.config
        # out_dir as this config has it: a Ray task builds into a folder of its own, a compare
        # into its backend's.
        job = WorkerJob(
            str(config.path),
            build.target.name,
            use_cache=use_cache,
            backends=build.backends,
            out_dir=str(config.out_dir),
        )
        read_end, write_end = os.pipe()
        try:
            pid = fork_worker(job, write_end)
        except OSError:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the worker's alone: its end of the pipe closes when it ends
        timeout = config.timeout
        deadline = time.monotonic() + timeout if timeout else None
        return cls(build, pid, read_end, timeout=timeout, deadline=deadline)

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def stop_at_timeout(self) -> TargetResult:
        from lowerd.worker.entry_site import failed_at_entry
        from lowerd.worker.workers import timeout_message

        self.kill()
        assert self.timeout is not None
        return failed_at_entry(
            self.build.config, self.target.name, "worker-timeout", timeout_message(self.timeout)
        )

    def read(self, progress: ProgressLine | None) -> bool:
        """Take in what the worker wrote; False once it closed its end."""
        data = os.read(self.events, 1 << 16)
        if not data:
            return False
        if not self.garbled:
            self.received += data
            self._take_frames(progress)
        return True

    def _take_frames(self, progress: ProgressLine | None) -> None:
        while True:
            try:
                message = take_frame(self.received)
                if message is None:
                    return
                event = parse_event(message)
            except (FrameError, ProtocolError):
                self.garbled = True
                return
            if isinstance(event, ResultEvent):
                self.result = event.result
            elif isinstance(event, PeakRssEvent):
                self.peak_rss = event.bytes
            elif isinstance(event, ProgressEvent) and progress:
                progress(event.stage, self.build.key, event.detail)

    def finish(self) -> TargetResult:
        os.close(self.events)
        _, status = os.waitpid(self.pid, 0)
        config = self.build.config
        if self.result is not None and not self.garbled:
            if self.result.ok and self.peak_rss:  # what its next build will need (a Ray task's)
                remember_peak_rss(config, self.target, self.peak_rss)
            return self.result
        return _crashed(config, self.target, status)

    def kill(self) -> None:
        kill_worker(self.pid)
        os.waitpid(self.pid, 0)
        os.close(self.events)


def _until_first_deadline(workers: Iterable[_Worker]) -> float | None:
    """How long select() may wait before a worker's timeout is due; None: no timeout runs."""
    deadlines = [w.deadline for w in workers if w.deadline is not None]
    return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None


def _crashed(config: ProjectConfig, target: TargetConfig, status: int) -> TargetResult:
    """The worker ended without a result: shown at the entry function, found without running
    user code again."""
    from lowerd.worker.entry_site import failed_at_entry
    from lowerd.worker.workers import exit_message

    return failed_at_entry(config, target.name, "worker-crash", exit_message(status))
