"""The daemon's batch scheduling, against a fake worker pool: how many builds run at once, when
memory holds one back, and what a client's leaving cancels. No process is started and torch is
never imported; tests/test_daemon_rpc.py runs the real thing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from lowerd.daemon import build_service
from lowerd.daemon.build_service import BuildService
from lowerd.daemon.workers import BuildRequest

from helpers import async_wait_until

pytestmark = pytest.mark.asyncio

GIB = 2**30


@dataclass
class FakeBuild:
    build_id: int
    request: BuildRequest
    on_event: Any
    future: asyncio.Future
    pid: int = 4242
    cancelled: bool = False

    async def result(self) -> dict[str, Any]:
        return await asyncio.shield(self.future)

    def cancel(self) -> None:
        self.cancelled = True
        self.future.set_result(_result(self.request.target, "error"))

    def finish(self, peak_rss: int = GIB) -> None:
        self.on_event({"type": "peak_rss", "bytes": peak_rss})
        self.future.set_result(_result(self.request.target, "ok"))


@dataclass
class FakePool:
    builds: list[FakeBuild] = field(default_factory=list)
    # target -> the targets running when it was submitted
    alongside: dict[str, list[str]] = field(default_factory=dict)

    def submit(self, request: BuildRequest, on_event: Any) -> FakeBuild:
        self.alongside[request.target] = self.running()
        build = FakeBuild(len(self.builds) + 1, request, on_event, asyncio.Future())
        self.builds.append(build)
        on_event({"type": "progress", "stage": "load", "detail": None})
        return build

    def running(self) -> list[str]:
        return [b.request.target for b in self.builds if not b.future.done()]

    def build_of(self, target: str) -> FakeBuild:
        [build] = [b for b in self.builds if b.request.target == target and not b.future.done()]
        return build


def _result(target: str, status: str) -> dict[str, Any]:
    return {"name": target, "status": status, "cache": {"hits": 0, "misses": 0}}


async def running(pool: FakePool, *targets: str) -> None:
    """Once exactly these targets' builds run (the batch's to_thread steps come first)."""
    await async_wait_until(lambda: pool.running() == list(targets), what=f"{targets} running")


def start_batch(
    service: BuildService, project: Path, targets: list[str], jobs: int
) -> tuple[asyncio.Task, list[dict]]:
    frames: list[dict] = []
    config = str(project / "pyproject.toml")
    batch = service.build(config, targets, True, jobs, frames.append)
    return asyncio.create_task(batch), frames


async def test_jobs_bounds_the_builds_at_once(project: Path) -> None:
    pool = FakePool()
    service = BuildService(pool)
    batch, frames = start_batch(service, project, ["tiny_linear", "refused", "pkg"], jobs=2)
    await running(pool, "tiny_linear", "refused")
    assert [b["target"] for b in service.builds()] == ["tiny_linear", "refused"]
    pool.build_of("refused").finish()
    await running(pool, "tiny_linear", "pkg")
    assert pool.alongside["pkg"] == ["tiny_linear"]  # it waited for a free job
    pool.build_of("tiny_linear").finish()
    pool.build_of("pkg").finish()
    document, exit_code = await batch
    assert [t["name"] for t in document["targets"]] == ["tiny_linear", "refused", "pkg"]
    assert exit_code == 0 and service.builds() == []
    assert {"type": "progress", "target": "pkg", "stage": "load", "detail": None} in frames


async def test_a_build_waits_until_its_last_peak_fits_in_memory(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = FakePool()
    service = BuildService(pool)
    config = str(project / "pyproject.toml")
    service.peak_rss[config, "refused"] = 6 * GIB  # its last build
    monkeypatch.setattr(build_service, "mem_available", lambda: 4 * GIB)
    batch, _ = start_batch(service, project, ["tiny_linear", "refused"], jobs=2)
    await running(pool, "tiny_linear")
    pool.build_of("tiny_linear").finish(peak_rss=GIB)
    await running(pool, "refused")
    assert pool.alongside["refused"] == []  # 6 GiB would not fit next to it; alone, it starts
    pool.build_of("refused").finish()
    await batch
    assert service.peak_rss == {(config, "tiny_linear"): GIB, (config, "refused"): GIB}


async def test_a_cancelled_batch_cancels_its_builds(project: Path) -> None:
    pool = FakePool()
    service = BuildService(pool)
    batch, _ = start_batch(service, project, ["tiny_linear", "refused", "pkg"], jobs=2)
    await running(pool, "tiny_linear", "refused")
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    assert [b.cancelled for b in pool.builds] == [True, True]  # pkg never started
    assert service.builds() == [] and service._admitted == 0


async def test_two_batches_take_turns_on_a_target(project: Path) -> None:
    pool = FakePool()
    service = BuildService(pool)
    first, _ = start_batch(service, project, ["tiny_linear"], jobs=1)
    second, _ = start_batch(service, project, ["tiny_linear"], jobs=1)
    await running(pool, "tiny_linear")
    pool.build_of("tiny_linear").finish()
    # No build record was written by the fake: the second batch builds it in its turn, once the
    # first build is over.
    await async_wait_until(lambda: len(pool.builds) == 2, what="the second build")
    assert pool.alongside["tiny_linear"] == []
    pool.build_of("tiny_linear").finish()
    await asyncio.gather(first, second)
