"""Regional edge generation for the bench: lowerd's own (src/lowerd/lowering/region_edge.py,
whose docstring argues it), with the helpers bench/region_locality.py compares it by.

`regional_edge_manager` is a drop-in for `executorch.exir.program._program.
_gen_edge_manager_for_partitioners` that runs lowerd's regional edge generation once and keeps
what it did in `LAST`; `regional()` installs it as lowerd's build does (without lowerd's other
shortcuts); `stock_edge` is ExecuTorch's own function on one program.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from lowerd.lowering.region_cut import layer_path, value_meta
from lowerd.lowering.region_edge import RegionalEdge

__all__ = ["layer_path", "regional", "regional_edge_manager", "signature_of", "stock_edge"]
__all__ += ["value_meta", "LAST"]


@dataclass
class RegionalRun:
    """What the last regional edge generation did."""

    regions: int = 0
    templates: int = 0
    fallback: str | None = None


LAST = RegionalRun()


def stock_edge(program: Any, config: Any = None, partitioners: Any = None) -> Any:
    """The stock function on one program, with the given partitioners (default: XNNPACK's)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program import _program

    return _program._gen_edge_manager_for_partitioners(
        {"forward": partitioners if partitioners is not None else [XnnpackPartitioner()]},
        {"forward": program},
        config or EdgeCompileConfig(),
        None,
    )


def regional_edge_manager(
    partitioner: Any,
    aten_programs: Any,
    config: Any,
    constant_methods: Any,
    generate_etrecord: Any = False,
) -> Any:
    """lowerd's regional edge generation on these arguments; what it did is in LAST."""
    from executorch.exir.program import _program

    global LAST
    regional = RegionalEdge()
    with regional.installed():
        manager = _program._gen_edge_manager_for_partitioners(
            partitioner, aten_programs, config, constant_methods, generate_etrecord
        )
    [run] = regional.runs
    LAST = RegionalRun(run.regions, run.templates, run.stock_because)
    return manager


def signature_of(node: torch.fx.Node) -> Any:
    def arg(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return "node"
        if isinstance(a, (list, tuple)):
            return tuple(arg(x) for x in a)
        return repr(a)

    return (
        str(node.target),
        arg(node.args),
        tuple(sorted((k, arg(v)) for k, v in node.kwargs.items())),
        value_meta(node.meta.get("val")),
    )


@contextmanager
def regional() -> Iterator[None]:
    with RegionalEdge().installed():
        yield
