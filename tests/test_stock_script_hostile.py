"""Issue 25 §1: `lowerd stock-script` builds its code from values, never from pasted text. A
project folder whose name closes a docstring and calls os.system, folders named `b\\N` and
`b\\x` (escapes Python refuses), and non-finite constants give scripts that compile, run no
code of their own, and write the bytes lowerd wrote."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.lowering.build import build_target
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.reproducer import stock_script

from helpers import PROJECTS
from stock import forget_project_modules, importable_copy, run_stock_script
from testkit.projects import copy_project

INJECTION = 'a"""and __import__("os").system("touch PWNED")or"""'
HOSTILE_FOLDERS = [INJECTION, "b\\N", "b\\x", "c'''\n\\", "d\re"]

CONSTANTS = '''
[tool.lowerd.targets.constants]
entry = "models/tiny_linear.py:make"
constant_methods = { big = inf, small = -inf, odd = nan, many = [1.5, inf], text = '"""\\N' }
'''


def hostile_project(base: Path, folder: str) -> Path:
    """The basic project copied under `base/folder`, with the constants target."""
    root = copy_project(PROJECTS / "basic", base / folder)
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + CONSTANTS)
    return root


@pytest.mark.parametrize("folder", HOSTILE_FOLDERS)
def test_every_script_compiles(tmp_path: Path, folder: str) -> None:
    config = load_config(hostile_project(tmp_path, folder) / "pyproject.toml")
    for target in ("tiny_linear", "constants", "two_methods"):
        assert_compiles(stock_script(config, config.targets[target]))


def assert_compiles(script: str) -> None:
    tree = ast.parse(script)  # a SyntaxError before issue 25
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "__import__" not in names  # the folder's name stays text
    compile(tree, "stock.py", "exec")


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectConfig]:
    """One project under every hostile folder at once: one build serves the run below."""
    base = tmp_path_factory.mktemp("hostile") / "b\\x" / "b\\N"
    with importable_copy(PROJECTS / "basic", base / INJECTION) as root:
        pyproject = root / "pyproject.toml"
        pyproject.write_text(pyproject.read_text() + CONSTANTS)
        yield load_config(pyproject)


def test_the_script_runs_no_pasted_code_and_writes_lowerds_bytes(
    nested: ProjectConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forget_project_modules(nested.root)
    result = build_target(nested, nested.targets["constants"], None)
    assert result.status == "ok", result.error
    script = stock_script(nested, nested.targets["constants"])
    forget_project_modules(nested.root)
    written = run_stock_script(script, tmp_path / "out", monkeypatch)
    assert written == {"constants.pte": result.sha256}  # no PWNED beside it
    assert not list(nested.root.rglob("PWNED")) and not (tmp_path / "PWNED").exists()
