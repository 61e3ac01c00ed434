"""The daemon's batch scheduling, against a fake worker pool: how many builds run at once, when
memory holds one back, and what a client's leaving cancels. No process is started and torch is
never imported; tests/test_daemon_rpc.py runs the real thing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from lowerd.daemon import build_service
from lowerd.daemon.build_service import BuildService
from lowerd.project.wire import encode

from helpers import FakePool, async_wait_until

pytestmark = pytest.mark.asyncio

GIB = 2**30


async def running(pool: FakePool, *targets: str) -> None:
    """Once exactly these targets' builds run (the batch's to_thread steps come first)."""
    await async_wait_until(lambda: pool.running() == list(targets), what=f"{targets} running")


def start_batch(
    service: BuildService, project: Path, targets: list[str], jobs: int
) -> tuple[asyncio.Task, list[dict]]:
    frames: list[dict] = []
    config = str(project / "pyproject.toml")
    batch = service.build(config, targets, True, jobs, lambda frame: frames.append(encode(frame)))
    return asyncio.create_task(batch), frames


async def test_jobs_bounds_the_builds_at_once(project: Path) -> None:
    pool = FakePool()
    service = BuildService(pool)
    batch, frames = start_batch(service, project, ["tiny_linear", "refused", "pkg"], jobs=2)
    await running(pool, "tiny_linear", "refused")
    assert [b.target for b in service.builds()] == ["tiny_linear", "refused"]
    pool.build_of("refused").finish()
    await running(pool, "tiny_linear", "pkg")
    assert pool.alongside["pkg"] == ["tiny_linear"]  # it waited for a free job
    pool.build_of("pkg").on_event({"type": "progress", "stage": "load", "detail": None})
    pool.build_of("tiny_linear").finish()
    pool.build_of("pkg").finish()
    document, outcome = await batch
    assert [t["name"] for t in document["targets"]] == ["tiny_linear", "refused", "pkg"]
    assert outcome == "ok" and service.builds() == []
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
    pool.build_of("refused").finish(peak_rss=GIB)
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
