"""Stock ExecuTorch's digests of the heavier programs the tests compare lowerd with, made with the
exact library versions and stock lowering code in tests/stock_digests.json, each keyed by a name
and a digest of its input (the exported program, or the project's files): with those versions,
that code and that input, the stock lowering (seconds of CPU each) is not run again; any other
version, a change to the stock chain every test shares (STOCK_CODE: a table made by other code
says nothing of this one's), or an input that changed, runs it live. A test whose stock call is
its own code keys the entry with its own file too (files_digest(Path(__file__), ...)). Stock's
input, code and versions being those of the entry, a table entry can only make a test fail where
live stock would pass (a stale digest), never pass where it would fail: lowerd's side always runs.

The live stock lowering still runs in every test that compares metadata or bytes with a stock
manager (tests/regional.py's regional_and_stock, tests/stock.py's stock_pte), and every test
that uses the table runs it live under LOWERD_TESTS_STOCK=live. LOWERD_TESTS_STOCK=record runs
live and writes what it found into the table (with this machine's versions), as the table was
made: `LOWERD_TESTS_STOCK=record pytest tests/test_region_*.py`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("stock_digests.json")
LIBRARIES = ("torch", "transformers", "torchao", "executorch")
# The stock chain the table's digests were made with, where it is not the test's own file.
_ROOT = Path(__file__).parent.parent
STOCK_CODE = (
    _ROOT / "testkit" / "stock_lowering.py",
    _ROOT / "testkit" / "stock_recipe.py",
    _ROOT / "tests" / "stock.py",
    _ROOT / "tests" / "regional.py",
)


def known_or_live(name: str, input_digest: str, live: Callable[[], str]) -> str:
    """The stock sha256 for `name` made from the input `input_digest`: the table's, with its exact
    versions and input, or `live()`'s."""
    mode = os.environ.get("LOWERD_TESTS_STOCK", "")
    if mode not in ("live", "record"):
        table = json.loads(TABLE.read_text())
        entry = table["digests"].get(name)
        if table["versions"] == made_with() and entry and entry["input"] == input_digest:
            return str(entry["sha256"])
    digest = live()
    if mode == "record":
        _record(name, input_digest, digest)
    return digest


def files_digest(*paths: Path) -> str:
    """The input digest of a stock run that these files alone make (names and contents): for a
    test whose stock calls are its own code on a project's files."""
    digest = hashlib.sha256()
    for path in sorted(file for each in paths for file in _files(each)):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    skipped = {"build", "__pycache__"}
    return [f for f in path.rglob("*") if f.is_file() and not skipped & set(f.parts)]


def made_with() -> dict[str, str]:
    """What a digest in the table was made with, besides its input: the libraries' versions and
    the shared stock chain's code."""
    return {
        **{library: version(library) for library in LIBRARIES},
        "stock code": files_digest(*STOCK_CODE),
    }


def program_digest(program: Any) -> str:
    """What an ExportedProgram (or a dict of them) gives its lowering: the graph's code, the
    signature, the ranges and the call graph, and every weight's and constant's bytes."""
    import torch

    digest = hashlib.sha256()
    programs = program if isinstance(program, dict) else {"": program}
    for method, each in sorted(programs.items()):
        digest.update(method.encode())
        digest.update(each.graph_module.code.encode())
        digest.update(str(each.graph_signature).encode())
        digest.update(repr(each.range_constraints).encode())
        digest.update(repr(each.module_call_graph).encode())
        for key, value in [*each.state_dict.items(), *each.constants.items()]:
            digest.update(key.encode())
            if isinstance(value, torch.Tensor):
                tensor = value.detach().contiguous().reshape(-1)
                digest.update(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
                digest.update(tensor.view(torch.uint8).numpy().tobytes())
            else:
                digest.update(repr(value).encode())
    return digest.hexdigest()


def _record(name: str, input_digest: str, digest: str) -> None:
    with open(Path(tempfile.gettempdir()) / "lowerd-stock-digests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker recording
        table = json.loads(TABLE.read_text()) if TABLE.is_file() else {"digests": {}}
        if table.get("versions") != made_with():
            table = {"versions": made_with(), "digests": {}}
        table["digests"][name] = {"input": input_digest, "sha256": digest}
        table["digests"] = dict(sorted(table["digests"].items()))
        TABLE.write_text(json.dumps(table, indent=2) + "\n")
