"""When each target builds: file changes debounced into one build per burst, one build per target
at a time, and a newer change cancelling the target's stale build.

Runs on the server's event loop; the watcher hands it changes thread-safely. Builds go to the
WorkerPool; results go to a BuildListener (the server), and only the current build of a target is
ever reported as its result: a superseded build's result is reported as not current. The
listener and `results` get TargetResults (project/result.py) and worker events as parsed
(worker/protocol.py): what leaves the process is made JSON where it leaves.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lowerd.daemon.ignored_folders import in_ignored_folder
from lowerd.project.build_state import discard_failed_output, load_state, up_to_date_report
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.result import TargetResult
from lowerd.worker.entry_site import entry_file
from lowerd.worker.protocol import BuiltEvent, WorkerEvent, WorkerJob
from lowerd.worker.tasks import spawn
from lowerd.worker.workers import BuildHandle, WorkerPool

DEBOUNCE_SECONDS = 0.2
# A burst that never pauses (a generator rewriting files for a while) still builds this often.
MAX_DELAY_SECONDS = 2.0

Stamp = tuple[int, int] | None  # (mtime_ns, size); None for a missing file


class BuildListener(Protocol):
    def build_started(self, target: str, build_id: int) -> None: ...

    def build_event(self, target: str, build_id: int, event: WorkerEvent) -> None: ...

    def build_finished(
        self, target: str, build_id: int | None, result: TargetResult, current: bool
    ) -> None: ...


@dataclass
class _Build:
    target: str
    handle: BuildHandle | None = None


@dataclass
class _Target:
    dirty: bool = False
    running: _Build | None = None
    idle: list[asyncio.Future[None]] = field(default_factory=list)


class Scheduler:
    def __init__(
        self,
        pool: WorkerPool,
        listener: BuildListener,
        job_for: Callable[[TargetConfig], WorkerJob],
        debounce: float = DEBOUNCE_SECONDS,
    ):
        self.pool = pool
        self.listener = listener
        self.job_for = job_for
        self.debounce = debounce
        self.config: ProjectConfig | None = None
        self.results: dict[str, TargetResult] = {}  # the last result of each target
        self._targets: dict[str, _Target] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._burst_started: float | None = None
        self._seen: dict[str, Stamp] = {}

    # What to build ---------------------------------------------------------------------------

    def set_config(self, config: ProjectConfig | None) -> None:
        """Builds of targets the new config no longer has are cancelled and forgotten."""
        self.config = config
        names = set(config.targets) if config else set()
        for name in list(self._targets):
            if name not in names:
                self._cancel(name)
                self._set_idle(name)
                del self._targets[name]
                self.results.pop(name, None)

    def note_change(self, path: Path) -> bool:
        """False for a change already seen: an editor's didSave and the watcher both report a
        save, and an editor's write may come as several events."""
        path = Path(os.path.realpath(path))
        stamp = _stamp(path)
        if self._seen.get(str(path), ()) == stamp:
            return False
        self._seen[str(path)] = stamp
        return True

    def rebuild_for(self, path: Path) -> list[str]:
        """Schedules the targets that read the file, and returns them."""
        targets = self.affected_targets(Path(os.path.realpath(path)))
        self.request(targets)
        return targets

    def affected_targets(self, path: Path) -> list[str]:
        """The targets whose last build read the file. A target with no recorded build (never
        built, or its last build failed, which records nothing) may read any of the project's
        Python files: it is rebuilt on a change of any of them."""
        if self.config is None or not self._is_project_source(path):
            return []
        affected = []
        for target in self.config.targets.values():
            if path in self._sources_of(target):
                affected.append(target.name)
            elif path.suffix == ".py" and load_state(self.config, target) is None:
                affected.append(target.name)
        return affected

    def request(self, targets: Iterable[str], now: bool = False) -> None:
        """Builds the targets after the debounce delay (or at once), cancelling stale builds."""
        marked = False
        for name in targets:
            if self.config is not None and name in self.config.targets:
                self._targets.setdefault(name, _Target()).dirty = True
                marked = True
        if not marked:
            return
        if now:
            self._fire()
        else:
            self._arm_timer()

    async def wait_idle(self, targets: Iterable[str]) -> dict[str, TargetResult | None]:
        """The targets' results once none of them has a build running or scheduled."""
        targets = list(targets)
        waits = []
        for name in targets:
            state = self._targets.get(name)
            if state is not None and (state.dirty or state.running):
                future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                state.idle.append(future)
                waits.append(future)
        await asyncio.gather(*waits)
        return {name: self.results.get(name) for name in targets}

    def building(self, name: str) -> bool:
        state = self._targets.get(name)
        return state is not None and (state.dirty or state.running is not None)

    def cancel_all(self) -> None:
        if self._timer:
            self._timer.cancel()
            self._timer = None
        for name in list(self._targets):
            self._targets[name].dirty = False
            self._cancel(name)
            self._set_idle(name)

    # When ------------------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        loop = asyncio.get_running_loop()
        if self._burst_started is None:
            self._burst_started = loop.time()
        left = self._burst_started + MAX_DELAY_SECONDS - loop.time()
        if self._timer:
            self._timer.cancel()
        self._timer = loop.call_later(max(min(self.debounce, left), 0), self._fire)

    def _fire(self) -> None:
        if self._timer:
            self._timer.cancel()
        self._timer = None
        self._burst_started = None
        for name, state in list(self._targets.items()):
            if state.dirty:
                state.dirty = False
                self._cancel(name)
                self._start(name)

    # Builds ----------------------------------------------------------------------------------

    def _start(self, name: str) -> None:
        assert self.config is not None
        target = self.config.targets[name]
        result = self._up_to_date(target)
        if result is not None:
            self._finish(name, None, result, current=True)
            return
        build = _Build(name)
        self._targets[name].running = build
        build.handle = self.pool.submit(
            self.job_for(target), lambda event: self._event(build, event)
        )
        self.listener.build_started(name, build.handle.build_id)
        spawn(self._await_result(build))

    def _up_to_date(self, target: TargetConfig) -> TargetResult | None:
        """The last build's report if nothing it read or wrote changed since: torch-free and
        quick, so a save that changes nothing (or reverts an edit) costs no worker."""
        assert self.config is not None
        try:
            return up_to_date_report(self.config, target)
        except OSError:  # a recorded file vanished mid-check: build to find out
            return None

    def _event(self, build: _Build, event: WorkerEvent) -> None:
        if build.handle is not None and self._is_current(build):
            if isinstance(event, BuiltEvent):  # written: the lens shows it while it verifies
                self.results[build.target] = event.result
            self.listener.build_event(build.target, build.handle.build_id, event)

    async def _await_result(self, build: _Build) -> None:
        assert build.handle is not None
        try:
            result = await build.handle.result()
        except Exception as error:  # the pool promises a result; the daemon outlives a broken one
            message = f"the build worker failed: {error}"
            result = TargetResult.failed(build.target, "worker-crash", message)
        current = self._is_current(build)
        if current:
            self._targets[build.target].running = None
        self._finish(build.target, build.handle.build_id, result, current)

    def _finish(self, name: str, build_id: int | None, result: TargetResult, current: bool) -> None:
        if current:
            self.results[name] = result
            if self.config is not None:
                discard_failed_output(self.config, result)
        try:
            self.listener.build_finished(name, build_id, result, current)
        finally:  # whoever awaits the target hears of it even if showing the result failed
            if current:
                self._set_idle(name)

    def _is_current(self, build: _Build) -> bool:
        state = self._targets.get(build.target)
        return state is not None and state.running is build

    def _cancel(self, name: str) -> None:
        state = self._targets.get(name)
        if state is not None and state.running is not None:
            build, state.running = state.running, None
            if build.handle is not None:
                build.handle.cancel()  # kills its worker; its result comes back as not current

    def _set_idle(self, name: str) -> None:
        state = self._targets.get(name)
        if state is None or state.dirty or state.running is not None:
            return
        waiting, state.idle = state.idle, []
        for future in waiting:
            if not future.done():
                future.set_result(None)

    # Which files are whose -------------------------------------------------------------------

    def _sources_of(self, target: TargetConfig) -> set[Path]:
        assert self.config is not None
        state = load_state(self.config, target)
        sources = {Path(os.path.realpath(s.path)) for s in state.sources} if state else set()
        entry = entry_file(self.config, target)
        if entry is not None:
            sources.add(Path(os.path.realpath(entry)))
        return sources

    def _is_project_source(self, path: Path) -> bool:
        assert self.config is not None
        if in_ignored_folder(path):
            return False
        for folder in (self.config.out_dir, self.config.cache_dir):
            if folder is not None and path.is_relative_to(os.path.realpath(folder)):
                return False
        return True


def _stamp(path: Path) -> Stamp:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size
