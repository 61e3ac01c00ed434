"""Fixtures shared by the test modules."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.daemon.runtime import process_alive

from helpers import PROJECTS, SharedBuild, build_basic, build_examples
from stock import importable_copy


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
        pid = json.loads(status_file.read_text())["pid"]
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def examples_build(tmp_path_factory: pytest.TempPathFactory) -> SharedBuild:
    """examples/, six targets, built once (helpers.build_examples): tests/test_cli.py reads its
    document, tests/test_quiet_output.py its stderr."""
    return build_examples(tmp_path_factory.mktemp("examples-build"))


@pytest.fixture(scope="session")
def basic_build(tmp_path_factory: pytest.TempPathFactory) -> SharedBuild:
    """basic/, every target, built once on a cold cache (helpers.build_basic), with a private
    $XDG_RUNTIME_DIR: no daemon serves it. Tests that build on it copy its cache."""
    folder = tmp_path_factory.mktemp("basic-build")
    (folder / "run").mkdir(mode=0o700)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("XDG_RUNTIME_DIR", str(folder / "run"))
        return build_basic(folder)
