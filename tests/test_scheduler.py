"""The Scheduler's promises, against a fake worker pool and with no debounce: which saves build
which targets, what a newer save does to a running build, and which result is shown as current.

The pool is our own seam: FakePool records what is submitted and cancelled, and each build ends
when the test says so. Build records are written as a worker would write them after a good
build, so that "which targets read this file" and "up to date" are the real code's answers. No
process is started and torch is never imported; tests/test_server.py runs the real thing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio

from lowerd.daemon.scheduler import Scheduler
from lowerd.project.build_state import (
    FileStamp,
    TargetState,
    save_state,
    stamp_files,
    target_inputs_digest,
)
from lowerd.project.config import ProjectConfig, TargetConfig, load_config
from lowerd.project.result import TargetResult
from lowerd.worker.protocol import ProgressEvent, WorkerEvent, WorkerJob

from helpers import (
    DEADLINE,
    PROJECTS,
    FakeBuild,
    FakePool,
    async_wait_until,
    ok_result,
)
from testkit.projects import copy_project, write_text_atomic

pytestmark = pytest.mark.asyncio

ALL = ["tiny_linear", "refused", "two_methods", "dynamic", "pkg"]
REFUSED = "models/refused.py"  # read by the refused target alone


# The fakes --------------------------------------------------------------------------------------


@dataclass
class Listener:
    """The server's side: every call, in order, with what the Scheduler hands over (typed)."""

    started: list[tuple[str, int]] = field(default_factory=list)
    events: list[tuple[str, int, WorkerEvent]] = field(default_factory=list)
    finished: list[tuple[str, int | None, TargetResult, bool]] = field(default_factory=list)
    fail_on_finish: bool = False

    def build_started(self, target: str, build_id: int) -> None:
        self.started.append((target, build_id))

    def build_event(self, target: str, build_id: int, event: WorkerEvent) -> None:
        self.events.append((target, build_id, event))

    def build_finished(
        self, target: str, build_id: int | None, result: TargetResult, current: bool
    ) -> None:
        self.finished.append((target, build_id, result, current))
        if self.fail_on_finish:
            raise RuntimeError("showing the result failed")

    def current(self, target: str) -> list[TargetResult]:
        return [r for t, _, r, current in self.finished if t == target and current]

    def of_build(self, build_id: int) -> list[tuple[TargetResult, bool]]:
        return [(r, current) for _, b, r, current in self.finished if b == build_id]


@dataclass
class Setup:
    scheduler: Scheduler
    pool: FakePool
    listener: Listener
    config: ProjectConfig

    def path(self, relative: str) -> Path:
        return self.config.root / relative

    def target(self, name: str) -> TargetConfig:
        return self.config.targets[name]

    def save(self, relative: str, text: str) -> list[str]:
        """An editor's save: the file written, the change noted, its targets scheduled."""
        path = self.path(relative)
        write_text_atomic(path, text)
        assert self.scheduler.note_change(path)
        return self.scheduler.rebuild_for(path)

    def edit(self, relative: str, comment: str) -> list[str]:
        """Saves the file with a comment added: a change of its text, not of its program."""
        return self.save(relative, self.path(relative).read_text() + f"\n# {comment}\n")

    def record(self, name: str, *sources: str) -> None:
        """What a worker leaves after a good build: the .pte and the build record."""
        target = self.target(name)
        output = self.config.output_path(name)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_bytes(f"pte of {name}".encode())
        stamp = FileStamp.of(output)
        state = TargetState(
            target=name,
            inputs_digest=target_inputs_digest(self.config, target),
            sources=stamp_files(self.path(s) for s in sources),
            output=stamp,
            # a record whose report names another output or digest is refused as no record
            report=TargetResult(name, "ok", output=stamp.path, sha256=stamp.sha256),
        )
        save_state(self.config, target, state)

    async def submitted(self, count: int) -> list[FakeBuild]:
        """The builds once `count` were submitted in all."""
        await async_wait_until(
            lambda: len(self.pool.builds) >= count, what=f"{count} builds submitted"
        )
        return self.pool.builds

    async def idle(self, *names: str) -> dict[str, TargetResult | None]:
        return await asyncio.wait_for(self.scheduler.wait_idle(names or ALL), DEADLINE)

    async def result(self, name: str) -> TargetResult:
        """The target's result once it is idle; it has one."""
        result = (await self.idle(name))[name]
        assert result is not None
        return result


@pytest_asyncio.fixture
async def setup(tmp_path: Path) -> Setup:
    """A copy of tests/projects/basic; nothing of it is imported here."""
    project = copy_project(PROJECTS / "basic", tmp_path / "basic")
    config = load_config(project / "pyproject.toml")
    pool, listener = FakePool(), Listener()

    def job_for(target: TargetConfig) -> WorkerJob:
        return WorkerJob(str(config.path), target.name)

    scheduler = Scheduler(pool, listener, job_for, debounce=0)
    scheduler.set_config(config)
    return Setup(scheduler, pool, listener, config)


async def built_once(setup: Setup) -> None:
    """Every target built and recorded, each reading its entry file (pkg also its layers)."""
    setup.scheduler.request(ALL, now=True)
    for build in await setup.submitted(len(ALL)):
        sources = [setup.target(build.target).entry.value.partition(":")[0]]
        if build.target == "pkg":
            sources = ["tiny_pkg/nets.py", "tiny_pkg/layers.py", "tiny_pkg/__init__.py"]
        setup.record(build.target, *sources)
        build.finish()
    await setup.idle()
    setup.listener.finished.clear()
    setup.listener.started.clear()
    setup.pool.builds.clear()


# What builds ------------------------------------------------------------------------------------


async def test_a_save_builds_the_targets_that_read_the_file_and_no_other(setup: Setup) -> None:
    await built_once(setup)
    assert setup.edit("tiny_pkg/layers.py", "edited") == ["pkg"]
    [build] = await setup.submitted(1)
    assert build.target == "pkg"
    build.finish()
    assert (await setup.result("pkg")).ok
    assert setup.pool.submitted() == ["pkg"]


async def test_a_never_built_target_builds_on_a_save_of_any_python_file(setup: Setup) -> None:
    """It may read any of them: nothing recorded says otherwise."""
    scheduled = setup.save("models/tiny_linear.py", setup.path("models/tiny_linear.py").read_text())
    assert sorted(scheduled) == sorted(ALL)
    for build in await setup.submitted(len(ALL)):
        build.finish()
    await setup.idle()
    assert sorted(setup.pool.submitted()) == sorted(ALL)


async def test_files_outside_the_sources_build_nothing(setup: Setup) -> None:
    """The build output, ignored folders and a file no target reads."""
    await built_once(setup)
    output = setup.config.output_path("tiny_linear")
    for path in (
        output,
        setup.path(".git/config"),
        setup.path("models/__pycache__/tiny_linear.cpython-311.pyc"),
        setup.path("notes.txt"),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, "changed")
        assert setup.scheduler.rebuild_for(path) == [], path
    await setup.idle()
    assert setup.pool.builds == [] and setup.listener.finished == []


async def test_a_change_already_seen_is_not_noted_twice(setup: Setup) -> None:
    """A didSave and the watcher's event(s) for one write are one change."""
    path = setup.path("models/refused.py")
    write_text_atomic(path, path.read_text() + "\n# one\n")
    assert setup.scheduler.note_change(path)
    assert not setup.scheduler.note_change(path)
    write_text_atomic(path, path.read_text() + "# two\n")
    assert setup.scheduler.note_change(path)


async def test_an_up_to_date_target_is_answered_without_a_worker(setup: Setup) -> None:
    """A save that changes no byte (or reverts an edit) costs no build."""
    await built_once(setup)
    assert setup.save(REFUSED, setup.path(REFUSED).read_text()) == ["refused"]
    await async_wait_until(
        lambda: setup.listener.finished or setup.pool.builds, what="an answer or a build"
    )
    assert setup.pool.builds == []
    [(target, build_id, result, current)] = setup.listener.finished
    assert (target, build_id, current) == ("refused", None, True)
    assert result.reused == "up-to-date"
    assert (await setup.idle("refused"))["refused"] is result


# A newer save and a running build ---------------------------------------------------------------


async def refused_building(setup: Setup) -> FakeBuild:
    """Every target built once, then a save of refused's model: its build, running."""
    await built_once(setup)
    setup.edit(REFUSED, "first")
    [first] = await setup.submitted(1)
    return first


async def saved_again(setup: Setup) -> FakeBuild:
    """A newer save of refused's model: the build it starts."""
    setup.edit(REFUSED, "second")
    [_, second] = await setup.submitted(2)
    return second


async def test_a_save_during_a_build_cancels_it_and_builds_again(setup: Setup) -> None:
    first = await refused_building(setup)
    assert setup.listener.started == [("refused", first.build_id)]
    second = await saved_again(setup)
    assert first.cancelled and not second.cancelled and second.target == "refused"
    # The cancelled build's result is told, but not as current, and is not the target's result.
    await async_wait_until(lambda: setup.listener.of_build(first.build_id), what="first ended")
    [(cancelled, current)] = setup.listener.of_build(first.build_id)
    assert cancelled.error is not None and cancelled.error.kind == "cancelled"
    assert current is False
    assert setup.scheduler.building("refused")
    assert setup.scheduler.results["refused"].ok  # still the last good one
    second.finish()
    result = await setup.result("refused")
    assert result.ok
    assert setup.listener.current("refused") == [result]


async def test_saves_in_one_burst_make_one_build(setup: Setup) -> None:
    await built_once(setup)
    for n in range(3):  # no await between them: the debounce timer fires once after the burst
        setup.edit(REFUSED, f"edit {n}")
    [build] = await setup.submitted(1)
    build.finish()
    await setup.idle("refused")
    assert setup.pool.submitted() == ["refused"] and not build.cancelled


async def test_a_result_that_comes_after_a_cancel_is_not_current(setup: Setup) -> None:
    """A worker that finished as it was being killed: its result is stale all the same."""
    first = await refused_building(setup)
    first.cancel = lambda: setattr(first, "cancelled", True)  # the kill lands too late
    second = await saved_again(setup)
    first.finish({**ok_result("refused"), "sha256": "stale"})
    await async_wait_until(lambda: setup.listener.of_build(first.build_id), what="first ended")
    [(_, current)] = setup.listener.of_build(first.build_id)
    assert current is False
    second.finish()
    assert (await setup.result("refused")).sha256 != "stale"
    assert all(r.sha256 != "stale" for r in setup.listener.current("refused"))


async def test_events_of_a_superseded_build_are_dropped(setup: Setup) -> None:
    first = await refused_building(setup)
    first.on_event({"type": "progress", "stage": "export"})
    second = await saved_again(setup)
    first.on_event({"type": "progress", "stage": "late"})
    second.on_event({"type": "progress", "stage": "load"})
    second.finish()
    await setup.idle("refused")
    assert [(b, e) for _, b, e in setup.listener.events] == [
        (first.build_id, ProgressEvent("export")),
        (second.build_id, ProgressEvent("load")),
    ]


async def test_a_build_of_one_target_does_not_cancel_another(setup: Setup) -> None:
    first = await refused_building(setup)
    setup.edit("models/dynamic.py", "edited")
    [_, second] = await setup.submitted(2)
    assert (first.target, second.target) == ("refused", "dynamic") and not first.cancelled
    first.finish()
    second.finish()
    results = await setup.idle("refused", "dynamic")
    assert all(r is not None and r.ok for r in results.values())


# Results and waiting ----------------------------------------------------------------------------


async def test_wait_idle_waits_for_the_build_and_returns_its_result(setup: Setup) -> None:
    setup.scheduler.request(["tiny_linear"], now=True)
    [build] = await setup.submitted(1)
    waiting = asyncio.ensure_future(setup.idle("tiny_linear"))
    await async_wait_until(lambda: setup.scheduler.building("tiny_linear"), what="building")
    assert not waiting.done()
    build.finish()
    result = (await waiting)["tiny_linear"]
    assert result is not None and result.ok
    assert not setup.scheduler.building("tiny_linear")


async def test_a_pool_that_fails_is_a_worker_crash_result(setup: Setup) -> None:
    setup.scheduler.request(["tiny_linear"], now=True)
    [build] = await setup.submitted(1)
    build.future.set_exception(ConnectionError("the fork server exited"))
    error = (await setup.result("tiny_linear")).error
    assert error is not None and error.kind == "worker-crash"
    assert "the fork server exited" in error.message


async def test_a_listener_that_fails_still_lets_waiters_go(setup: Setup) -> None:
    setup.listener.fail_on_finish = True
    setup.scheduler.request(["tiny_linear"], now=True)
    [build] = await setup.submitted(1)
    waiting = asyncio.ensure_future(setup.idle("tiny_linear"))
    build.finish()
    result = (await waiting)["tiny_linear"]
    assert result is not None and result.ok


async def test_a_target_the_config_drops_is_cancelled_and_forgotten(setup: Setup) -> None:
    setup.scheduler.request(["tiny_linear", "refused"], now=True)
    builds = await setup.submitted(2)
    fewer = setup.config.root / "pyproject.toml"
    text = fewer.read_text()
    start = text.index("[tool.lowerd.targets.refused]")
    end = text.index("[tool.lowerd.targets.two_methods]")
    write_text_atomic(fewer, text[:start] + text[end:])
    setup.scheduler.set_config(load_config(fewer))
    [dropped] = [b for b in builds if b.target == "refused"]
    [kept] = [b for b in builds if b.target == "tiny_linear"]
    assert dropped.cancelled and not kept.cancelled
    assert not setup.scheduler.building("refused") and "refused" not in setup.scheduler.results
    kept.finish()
    await setup.idle("tiny_linear")
    assert [r for t, _, r, current in setup.listener.finished if t == "refused" and current] == []


async def test_cancel_all_ends_every_build_and_pending_request(setup: Setup) -> None:
    setup.scheduler.request(["tiny_linear"], now=True)
    [build] = await setup.submitted(1)
    setup.scheduler.request(["refused"])  # scheduled, not yet started
    setup.scheduler.cancel_all()
    assert build.cancelled
    results = await setup.idle("tiny_linear", "refused")
    assert results == {"tiny_linear": None, "refused": None}
    # The pending request went with it: the next start builds only what is asked then.
    setup.scheduler.request(["dynamic"], now=True)
    await setup.submitted(2)
    assert setup.pool.submitted() == ["tiny_linear", "dynamic"]


async def test_a_save_seen_through_a_symlink_is_the_same_file(setup: Setup, tmp_path: Path) -> None:
    await built_once(setup)
    link = tmp_path / "link"
    link.symlink_to(setup.config.root)
    assert setup.scheduler.rebuild_for(link / "models" / "refused.py") == ["refused"]
