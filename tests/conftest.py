"""Fixtures shared by the test modules."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from lowerd.daemon.runtime import process_alive

from helpers import (
    PROJECTS,
    TESTS,
    SharedBuild,
    build_basic,
    build_broken_at_debug,
    build_examples,
    build_named_without_cache,
    made_once_per_run,
    run_folder,
)
from stock import forget_project_modules, importable_copy, share_stock_ptes


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The heaviest files first (tests/file_seconds.json, recorded by tests/file_seconds.py), so
    `--dist loadfile` hands the two workers the long files early and the short ones fill in at
    the end; pytest-xdist's own order (by test count, which pyproject's addopts turns off) left a
    heavy file with few tests for the end, one worker idle while the other ran it. A stable sort:
    the order within a file, which module fixtures rely on, stays. A file the table does not know
    yet counts as a middling one."""
    seconds: dict[str, int] = json.loads(TESTS.joinpath("file_seconds.json").read_text())
    middling = sorted(seconds.values())[len(seconds) // 2]
    items.sort(key=lambda item: -seconds.get(item.path.name, middling))


@pytest.fixture(scope="session", autouse=True)
def stock_ptes_shared_by_workers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Under pytest-xdist, a stock .pte one worker lowered serves the others (stock.py)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        share_stock_ptes(run_folder(tmp_path_factory) / "stock-ptes")


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A private copy of tests/projects/basic; its modules and sys.path entry are gone after."""
    with importable_copy(PROJECTS / "basic", tmp_path / "basic") as root:
        yield root


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """$XDG_RUNTIME_DIR for every process of the module, this one included: its daemons' sockets
    and status files stay private to it. Daemons left running by a failed test are killed at
    the end."""
    folder = tmp_path_factory.mktemp("run")
    folder.chmod(0o700)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("XDG_RUNTIME_DIR", str(folder))
        env.delenv("LOWERD_LOG_LEVEL", raising=False)
        yield folder
    for status_file in (folder / "lowerd").glob("*.json"):
        if not status_file.is_file():  # a FIFO a test planted: its read would wait for good
            continue
        pid = json.loads(status_file.read_text())["pid"]
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def examples_build(tmp_path_factory: pytest.TempPathFactory) -> SharedBuild:
    """examples/, six targets, built once per run (helpers.build_examples): tests/test_cli.py
    reads its document, tests/test_quiet_output.py its stderr."""
    return made_once_per_run(tmp_path_factory, "examples-build", build_examples)


def privately(make: Callable[[Path], SharedBuild]) -> Callable[[Path], SharedBuild]:
    """`make` under a private $XDG_RUNTIME_DIR in its folder: no daemon serves its builds."""

    def build(folder: Path) -> SharedBuild:
        (folder / "run").mkdir(mode=0o700)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("XDG_RUNTIME_DIR", str(folder / "run"))
            return make(folder)

    return build


@pytest.fixture(scope="session")
def basic_build(tmp_path_factory: pytest.TempPathFactory) -> SharedBuild:
    """basic/, every target, built once per run on a cold cache (helpers.build_basic), with a
    private $XDG_RUNTIME_DIR: no daemon serves it. Tests that build on it copy its cache."""
    return made_once_per_run(tmp_path_factory, "basic-build", privately(build_basic))


@pytest.fixture(scope="session")
def broken_debug_build(tmp_path_factory: pytest.TempPathFactory) -> SharedBuild:
    """broken/, every target, built once per run with LOWERD_LOG_LEVEL=DEBUG
    (helpers.build_broken_at_debug): tests/test_cli.py and tests/test_cli_isolation.py read it.
    Under a private $XDG_RUNTIME_DIR, as basic_build."""
    build = privately(build_broken_at_debug)
    return made_once_per_run(tmp_path_factory, "broken-debug-build", build)


@pytest.fixture(scope="session")
def named_build(tmp_path_factory: pytest.TempPathFactory) -> SharedBuild:
    """basic/'s tiny_linear alone, built once per run with no usable cache
    (helpers.build_named_without_cache): tests/test_cli.py and tests/test_cache_integrity.py
    read it. Under a private $XDG_RUNTIME_DIR, as basic_build."""
    return made_once_per_run(tmp_path_factory, "named-build", privately(build_named_without_cache))


@dataclass(frozen=True)
class ColdBuild:
    """One target of basic/ built in this process, alone, on an empty cache, reuse=False."""

    root: Path  # the project copy it was built in (shared: read it only)
    cache: Path  # its blob cache as the build left it (copy it to build on)
    result: Any  # the TargetResult
    speedups: list[Any]  # every EdgeSpeedups the build installed (lowering/edge_speedups.py)


@pytest.fixture(scope="session")
def basic_cold(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ColdBuild]:
    """Each target of basic/ built cold, in-process, once per run: tests/test_fidelity.py's
    cold builds and tests/test_edge_speedups.py's counts of skipped replays. A worker that did
    not build them reads them (helpers.made_once_per_run): the speedups without their store."""
    return made_once_per_run(tmp_path_factory, "basic-cold", _build_basic_cold)


def _build_basic_cold(folder: Path) -> dict[str, ColdBuild]:
    from lowerd.cache.store import BlobStore
    from lowerd.lowering.build import build_target
    from lowerd.lowering.edge_speedups import EdgeSpeedups
    from lowerd.project.config import load_config

    built: dict[str, ColdBuild] = {}
    with pytest.MonkeyPatch.context() as patch:
        seen: list[EdgeSpeedups] = []
        original = EdgeSpeedups.installed

        def spied(self: EdgeSpeedups) -> Any:
            seen.append(self)
            return original(self)

        patch.setattr(EdgeSpeedups, "installed", spied)
        with importable_copy(PROJECTS / "basic", folder / "basic") as root:
            config = load_config(root / "pyproject.toml")
            for name, target in config.targets.items():
                seen.clear()
                forget_project_modules(root)
                cache = folder / "cache" / name
                result = build_target(config, target, BlobStore(cache), reuse=False)
                assert result.status == "ok", result.error
                speedups = [replace(s, store=None) for s in seen]
                built[name] = ColdBuild(root, cache, result, speedups)
    return built
