"""Fixtures shared by the in-process tests."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import PROJECTS
from stock import forget_project_modules


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A private copy of tests/projects/basic; its modules and sys.path entry are gone after."""
    root = tmp_path / "basic"
    shutil.copytree(PROJECTS / "basic", root, ignore=shutil.ignore_patterns("build", "__pycache__"))
    saved_path = list(sys.path)
    yield root
    sys.path[:] = saved_path
    forget_project_modules(root)
