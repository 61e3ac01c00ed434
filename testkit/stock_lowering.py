"""The reference every lowerd .pte is compared with: stock ExecuTorch, written out by hand.

It does not reuse lowerd's loader or builder, so a bug there cannot hide in the reference. The
tests (tests/stock.py) and the benches' stock workers (bench/harness.py) both lower with it.

Imports only the standard library at the top: a bench worker's import clock starts after this
module is imported, and tests that need no stock .pte start without torch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def importable(root: Path) -> Iterator[None]:
    """The project's folder first on sys.path while the block runs, as `python script.py` run
    in that folder has it: a user's stock script imports its models so. sys.path is as before
    after the block."""
    saved = list(sys.path)
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path[:] = saved


def lower_stock(
    returned: Any, partitioners: list[Any], mark: Callable[[str], None] | None = None
) -> tuple[Any, bytes]:
    """Stock ExecuTorch on what an entry returned ((module, args[, dynamic_shapes]) or a dict of
    methods): torch.export of each method, to_edge_transform_and_lower with the partitioners,
    to_executorch. Returns the edge program manager and the .pte's bytes; `mark` is told each
    stage as it starts ("export", "lower", "emit")."""
    import torch
    from executorch.exir import to_edge_transform_and_lower

    stage = mark or (lambda _stage: None)
    methods = returned if isinstance(returned, dict) else {"forward": returned}
    stage("export")
    exported = {
        method: torch.export.export(spec[0], spec[1], dynamic_shapes=_dynamic_shapes(spec))
        for method, spec in methods.items()
    }
    stage("lower")
    edge = to_edge_transform_and_lower(exported, partitioner=partitioners)
    stage("emit")
    return edge, bytes(edge.to_executorch().buffer)


def _dynamic_shapes(spec: tuple[Any, ...]) -> Any:
    return spec[2] if len(spec) > 2 else None
