"""torch's CompositeImplicitAutograd op collection, populated once per collection instead of once
per op namespace: installed only while lowerd lowers (issue 23 §4).

Every `run_decompositions` call collects the functional CompositeImplicitAutograd ops (torch's
`_collect_all_valid_cia_ops`, once to split the table and once more when the table is
materialized), and ExecuTorch's edge generation makes three such calls per method: on a module
of a few ops (the edited region lowered alone, lowering/edited_region.py) these collections were
the largest part of its edge generation. A collection visits each namespace of `torch.ops`
(about 40) and, for each but aten, first calls `_materialize_cpp_cia_ops`, which asks the C++
dispatcher for every CompositeImplicitAutograd registration of every namespace and looks each
one up in `torch.ops` to create its Python object: the same work, for all namespaces, each time.

Within one collection that work is done once here: the first call runs as it is, and the later
calls of the same collection return at once. The same ops are found, because:
- what `_materialize_cpp_cia_ops` does does not depend on the namespace being collected: it
  populates `torch.ops` from the whole dispatcher, and a second call finds every op it would
  create already there;
- nothing between two calls of one collection registers an op: a namespace's ops are read
  (their overloads, schemas, and kernels as the dispatcher and `py_kernels` say) and added to a
  set, never defined;
- the first call happens where torch's would (at the first namespace that is not aten, or inside
  aten's own cached collection), so a namespace it adds to `torch.ops` is visited as torch's loop
  would visit it: appended to the list the loop walks.
A collection's result is never kept: the next one populates again, so an op registered between
two decompositions (torch's comment on why the collection is not cached) is found.
tests/test_cia_ops.py compares the sets with torch's, an op registered by a new library included;
every build's bytes are compared with stock's by the suite.

Active only with the torch and ExecuTorch versions this was checked against
(edge_speedups.validated_versions); with any other, torch runs as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lowerd.lowering.edge_speedups import validated_versions

# Where torch's decomposition code calls the collection by name: each module's own binding.
_CALLERS = ("torch._export.utils", "torch.export.exported_program", "torch.export.decomp_utils")
_COLLECT = "_collect_all_valid_cia_ops"
_MATERIALIZE = "_materialize_cpp_cia_ops"


@contextmanager
def cia_ops_materialized_once() -> Iterator[None]:
    """Until exit, each CIA op collection populates `torch.ops` once, not once per namespace."""
    if not validated_versions():
        yield
        return
    import importlib

    from torch._export import utils

    collect, materialize = getattr(utils, _COLLECT), getattr(utils, _MATERIALIZE)
    collecting: list[bool] = []  # one flag per collection under way: has it populated yet?

    def materialize_once() -> None:
        if not collecting:  # called outside a collection: torch's, as it is
            materialize()
        elif not collecting[-1]:
            materialize()
            collecting[-1] = True

    def collect_populating_once() -> Any:
        collecting.append(False)
        try:
            return collect()
        finally:
            collecting.pop()

    callers = [importlib.import_module(name) for name in _CALLERS]
    swapped: list[tuple[Any, str, Callable[..., Any]]] = [(utils, _MATERIALIZE, materialize)]
    swapped += [(module, _COLLECT, collect) for module in callers if hasattr(module, _COLLECT)]
    setattr(utils, _MATERIALIZE, materialize_once)
    for module, name, _ in swapped[1:]:
        setattr(module, name, collect_populating_once)
    try:
        yield
    finally:
        for module, name, original in swapped:
            setattr(module, name, original)
