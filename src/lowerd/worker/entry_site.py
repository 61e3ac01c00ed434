"""Where a target's entry function is defined, found by reading its source, never importing it.

A worker that crashed or hung reports no location; its error is shown at the entry function.
The daemon must not run user code (nor import torch) to find it, so the file is parsed with ast.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from lowerd.project.config import ProjectConfig, TargetConfig, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.result import TargetResult
from lowerd.project.source_map import UserFiles


@dataclass(frozen=True)
class Site:
    """A 1-based line in a file; the file is absolute."""

    path: Path
    line: int


def entry_site(config: ProjectConfig, target: TargetConfig) -> Site:
    """The entry function's `def` line; the config's `entry = ...` line when the file or the
    function cannot be found (a missing file, a syntax error, `make = something()`)."""
    _, function = target.entry_parts()
    path = entry_file(config, target)
    if path is not None:
        line = _def_line(path, function)
        if line is not None:
            return Site(path, line)
    return Site(config.path, target.entry.line)


def entry_file(config: ProjectConfig, target: TargetConfig) -> Path | None:
    """The entry's source file: its path, or for `package.module:make` the module's file under
    the project folder (which lowerd puts first on sys.path)."""
    path = config.entry_path(target)
    if path is not None:
        return path
    module = Path(*target.entry_parts()[0].split("."))
    for candidate in (
        config.root / module.with_suffix(".py"),
        config.root / module / "__init__.py",
    ):
        if candidate.is_file():
            return candidate
    return None


def _def_line(path: Path, function: str) -> int | None:
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    # A top-level definition is the one an import finds; a nested one is a last resort.
    top_level = [node for node in tree.body if _defines(node, function)]
    anywhere = [node for node in ast.walk(tree) if _defines(node, function)]
    found = top_level[-1:] or anywhere[:1]
    return found[0].lineno if found else None


def _defines(node: ast.AST, name: str) -> TypeGuard[ast.FunctionDef | ast.AsyncFunctionDef]:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name


def failed_at_entry(
    config: ProjectConfig | Path, target_name: str, kind: str, message: str
) -> TargetResult:
    """The result of a build that ended without one (a crash, a timeout), at the entry function:
    the same place on every path, in-process or through the daemon."""
    try:
        config = config if isinstance(config, ProjectConfig) else load_config(config)
        target = config.targets[target_name]
    except (ConfigError, KeyError):  # the config changed under the build: no place to point at
        return TargetResult.failed(target_name, kind, message)
    site = entry_site(config, target)
    file = UserFiles(config.root).display(site.path)
    return TargetResult.failed(target_name, kind, message, file, site.line)
