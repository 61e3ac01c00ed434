"""The reference every lowerd .pte is compared with: a plain ExecuTorch run, written out by hand
(testkit/stock_lowering.py, which the benches lower with too), on the tests' projects.

It does not reuse lowerd's loader or builder, so a bug there cannot hide in the reference.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helpers import PROJECTS
from testkit.projects import copy_project
from testkit.stock_lowering import importable, lower_stock

__all__ = [
    "PROJECTS",
    "call_entry",
    "forget_project_modules",
    "importable_copy",
    "sha256",
    "stock_pte",
]

PARTITIONERS = {
    "xnnpack": lambda: _import(
        "executorch.backends.xnnpack.partition.xnnpack_partitioner"
    ).XnnpackPartitioner(),
    "vulkan": lambda: _import(
        "executorch.backends.vulkan.partitioner.vulkan_partitioner"
    ).VulkanPartitioner(),
    "coreml": lambda: _import("executorch.backends.apple.coreml.partition").CoreMLPartitioner(),
}


def _import(name: str) -> Any:
    return importlib.import_module(name)


def call_entry(root: Path, entry: str) -> Any:
    """Run `models/x.py:make` or `pkg.mod:make` from a project folder, as a user script would."""
    where, _, function = entry.rpartition(":")
    forget_project_modules(root)
    try:
        with importable(root):
            if where.endswith(".py"):
                name = ".".join(Path(where).with_suffix("").parts)
                spec = importlib.util.spec_from_file_location(name, root / where)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(where)
            return getattr(module, function)()
    finally:
        forget_project_modules(root)


# (the project's files, entry, backends) -> the stock .pte. A stock lowering takes seconds and
# several test modules compare with the same one (an unedited basic/ or quantized/ target): it is
# made once per session. The key holds every file of the project, so an edited copy is lowered
# afresh.
_STOCK_PTES: dict[tuple[str, str, tuple[str, ...]], bytes] = {}


def stock_pte(root: Path, entry: str, backends: list[str]) -> bytes:
    key = (_tree_digest(root), entry, tuple(backends))
    if key not in _STOCK_PTES:
        _STOCK_PTES[key] = _lower_stock(root, entry, backends)
    return _STOCK_PTES[key]


def _tree_digest(root: Path) -> str:
    """The digest of every file under root but build outputs and bytecode: names and contents."""
    digest = hashlib.sha256()
    for path in sorted(Path(root).rglob("*")):
        relative = path.relative_to(root)
        if {"build", "__pycache__"} & set(relative.parts) or not path.is_file():
            continue
        data = path.read_bytes()
        digest.update(f"{relative.as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _lower_stock(root: Path, entry: str, backends: list[str]) -> bytes:
    returned = call_entry(root, entry)
    _, buffer = lower_stock(returned, [PARTITIONERS[name]() for name in backends])
    return buffer


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def forget_project_modules(root: Path) -> None:
    """Projects share module names (`models`); a rebuilt or edited project must import afresh."""
    root = root.resolve()
    for name, module in list(sys.modules.items()):
        if _lives_under(module, root):
            del sys.modules[name]


def _lives_under(module: Any, root: Path) -> bool:
    places = [getattr(module, "__file__", None)]
    search_path = getattr(module, "__path__", None)
    if isinstance(search_path, list):  # torch's op namespaces fake a __path__ of another type
        places.extend(search_path)
    return any(isinstance(p, str) and Path(p).resolve().is_relative_to(root) for p in places)


@contextmanager
def importable_copy(source: Path, destination: Path) -> Iterator[Path]:
    """A private copy of a project whose modules the test imports in this process: sys.path and
    the copy's modules are as before once it is done."""
    copy_project(source, destination)
    saved_path = list(sys.path)
    try:
        yield destination
    finally:
        sys.path[:] = saved_path
        forget_project_modules(destination)


def run_stock_script(script: str, folder: Path, monkeypatch: Any) -> dict[str, str]:
    """A generated stock script run as `python script.py` in folder (in this process: it
    imports what this process has imported already); the sha256 of each file it wrote."""
    import runpy

    folder.mkdir()
    path = folder / "stock.py"
    path.write_text(script)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    runpy.run_path(str(path), run_name="__main__")
    return {
        file.name: hashlib.sha256(file.read_bytes()).hexdigest()
        for file in sorted(folder.iterdir())
        if file.name != "stock.py"
    }
