"""The reference every lowerd .pte is compared with: a plain ExecuTorch run, written out by hand
(testkit/stock_lowering.py, which the benches lower with too), on the tests' projects.

It does not reuse lowerd's loader or builder, so a bug there cannot hide in the reference.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import importlib.util
import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from helpers import PROJECTS
from testkit.projects import copy_project
from testkit.stock_lowering import importable, lower_stock
from testkit.stock_recipe import (
    lower_recipe,
    optimum_constant_methods,
    optimum_quantize_model,
    optimum_recipe,
)

__all__ = [
    "PROJECTS",
    "call_entry",
    "entry_function",
    "forget_project_modules",
    "importable_copy",
    "known_stock_digest",
    "optimum_pte",
    "optimum_quantize_model",
    "sha256",
    "share_stock_ptes",
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
    return entry_function(root, entry, call=True)


def entry_function(root: Path, entry: str, *, call: bool = False) -> Any:
    """`models/x.py:name` or `pkg.mod:name` imported from a project folder, as a user script
    would: the function, or what it returns when called there (`call`)."""
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
            found = getattr(module, function)
            return found() if call else found
    finally:
        forget_project_modules(root)


# (the project's files, entry, backends) -> the stock .pte. A stock lowering takes seconds and
# several test modules compare with the same one (an unedited basic/ or quantized/ target): it is
# made once per session. The key holds every file of the project, so an edited copy is lowered
# afresh.
_STOCK_PTES: dict[tuple[str, str, tuple[str, ...]], bytes] = {}
# Under pytest-xdist each worker is a session of its own: the workers share the .ptes through a
# folder of the run (conftest.py), each lowered by the first worker that asks for it.
_SHARED: list[Path] = []


def share_stock_ptes(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    _SHARED[:] = [folder]


def stock_pte(root: Path, entry: str, backends: list[str]) -> bytes:
    key = (_tree_digest(root), entry, tuple(backends))
    if key not in _STOCK_PTES:
        _STOCK_PTES[key] = _shared_or_lowered(key, root, entry, backends)
    return _STOCK_PTES[key]


def known_stock_digest(name: str, root: Path, entry: str, backends: list[str]) -> str:
    """sha256(stock_pte(...)), or tests/stock_digests.json's under `name` for these files with
    these versions (tests/known_stock.py): for the heavier projects whose stock bytes only their
    digest is compared with."""
    from known_stock import known_or_live

    key = (_tree_digest(root), entry, tuple(backends))
    input_digest = hashlib.sha256(repr(key).encode()).hexdigest()
    return known_or_live(name, input_digest, lambda: sha256(stock_pte(root, entry, backends)))


def _shared_or_lowered(
    key: tuple[str, str, tuple[str, ...]], root: Path, entry: str, backends: list[str]
) -> bytes:
    if not _SHARED:
        return _lower_stock(root, entry, backends)
    path = _SHARED[0] / f"{hashlib.sha256(repr(key).encode()).hexdigest()}.pte"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker lowering it: wait for its bytes
        if path.is_file():
            return path.read_bytes()
        buffer = _lower_stock(root, entry, backends)
        path.with_suffix(".part").write_bytes(buffer)
        path.with_suffix(".part").replace(path)
        return buffer


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
    said = io.StringIO()
    with redirect_stdout(said):
        runpy.run_path(str(path), run_name="__main__")
    written = {
        file.name: hashlib.sha256(file.read_bytes()).hexdigest()
        for file in sorted(folder.iterdir())
        if file.name != "stock.py"
    }
    # the script says each .pte's digest, as a user running it reads it
    lines = said.getvalue().splitlines()
    for name in (name for name in written if name.endswith(".pte")):
        said_line = f"{name}: sha256 {written[name]}"
        assert any(line.endswith(said_line) for line in lines), (said_line, lines)
    return written


# optimum-executorch 1.1.0's xnnpack recipe (optimum/exporters/executorch), its calls written out -


def optimum_pte(method: Any, *, custom_sdpa: bool) -> bytes:
    """integrations.py CausalLMExportableModule.export and recipes/xnnpack.py
    _lower_to_executorch on a decoder wrapped as transformers' static-cache module (a
    lowerd.Method with keyword inputs): the .pte's bytes (testkit/stock_recipe.py).
    optimum's RemovePaddingIdxEmbeddingPass is tests/projects/optimum/passes.py's."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes

    recipe = optimum_recipe(
        [RemoveRedundantTransposes()],
        call_entry(PROJECTS / "optimum", "passes.py:transform_passes"),
        optimum_constant_methods(method.module.model, custom_sdpa),
    )
    return lower_recipe(method, [XnnpackPartitioner()], recipe)[1]
