"""Transform passes regional edge generation covers: those argued to give the assembled edge
program what they give stock's.

to_edge_transform_and_lower runs its `transform_passes` on the EdgeProgramManager that
`_gen_edge_manager_for_partitioners` returned (`edge_manager.transform(passes)`, then
lift_constant_tensor_pass per method), after edge generation and before partitioning. So regional
generation need not run them; it must only hand them a program on which they do what they do on
stock's. The assembled program's nodes, targets, arguments, names, values and the metadata later
stages read are stock's (region_edge.py), but a few fields are the template's (`seq_nr`,
`original_aten`, `eager_input_vals`, some placeholders' `desc`, from_node's middle links): a pass
reading those, or copying them where a later stage reads them, could differ. Hence a per-pass
allow-list, each argued:

- optimum-executorch's RemovePaddingIdxEmbeddingPass (optimum/executorch/passes/
  remove_padding_idx_embedding_pass.py, which its xnnpack recipe passes): for each node it reads
  `op`, `target` and the number of `args`, drops an edge `aten.embedding`'s third argument
  (padding_idx), then recompiles the graph module; it reads no metadata and no state of its own.
  On the assembled program (stock's nodes and arguments in stock's order) it rewrites the same
  nodes alike. What `transform` does around it (a new ExportedProgram with the signature updated
  from the graph, the verifier of the manager's config) reads what is stock's.

A pass is the allow-listed one when its class is that code: bases (ExportPass), no other members
than `call` and an `__init__` that only calls ExportPass's, each with the reference's bytecode,
constants and names, and the globals it names bound to the same objects; no instance attribute
shadows what PassBase calls. So the user's copy of it (tests/projects/optimum/passes.py is one,
as a recipe written out is) counts, and a pass that differs in anything it runs does not.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from types import FunctionType
from typing import Any

# Class members a Python class (of ExportPass's metaclass) has without defining them.
_IMPLICIT = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__annotations__",
        "__firstlineno__",
        "__static_attributes__",
        "__orig_bases__",
        "__abstractmethods__",  # ExportPass's ABCMeta: the abstract methods left (none: made)
        "_abc_impl",
    }
)
# What PassBase.__call__ looks up on the pass.
_CALLED = frozenset({"call", "requires", "ensures"})


def why_passes(passes: Any) -> str | None:
    """Why the transform passes are not ones the argument covers, or None (also without any)."""
    if passes is None:
        return None
    if isinstance(passes, dict):
        listed = [each for method in passes.values() for each in method]
    elif isinstance(passes, Sequence):
        listed = list(passes)
    else:
        return f"transform passes given as a {type(passes).__name__}"
    for each in listed:
        if not _covered(each):
            name = getattr(each, "__name__", None) or type(each).__name__  # a function: its own
            return f"a transform pass the argument does not cover ({name})"
    return None


def _covered(each: Any) -> bool:
    reference = _reference()
    kind = type(each)
    if type(kind) is not type(reference) or kind.__bases__ != reference.__bases__:
        return False
    members = set(vars(kind)) - _IMPLICIT
    if not members <= {"call", "__init__"} or "call" not in members:
        return False
    if _CALLED & set(getattr(each, "__dict__", {})):
        return False
    if not _same_code(vars(kind)["call"], vars(reference)["call"]):
        return False
    init = vars(reference)["__init__"]
    return "__init__" not in members or _same_code(vars(kind)["__init__"], init)


def _same_code(mine: Any, theirs: Any) -> bool:
    """The two functions run the same: bytecode, constants (of one type: 1 == True), names, no
    defaults, and each global they name bound to one object (a builtin included)."""
    if not isinstance(mine, FunctionType) or not isinstance(theirs, FunctionType):
        return False
    a, b = mine.__code__, theirs.__code__
    same = (
        a.co_code == b.co_code
        and [(type(c), c) for c in a.co_consts] == [(type(c), c) for c in b.co_consts]
        and a.co_names == b.co_names
        and a.co_varnames == b.co_varnames
        and a.co_freevars == b.co_freevars
        and a.co_argcount == b.co_argcount
        and a.co_kwonlyargcount == b.co_kwonlyargcount
        and not mine.__defaults__
        and not mine.__kwdefaults__
    )
    return same and all(
        _bound(mine, name) is _bound(theirs, name)
        for name in a.co_names
        if name in mine.__globals__ or name in theirs.__globals__
    )


_MISSING = object()


def _bound(function: FunctionType, name: str) -> Any:
    if name in function.__globals__:
        return function.__globals__[name]
    return getattr(builtins, name, _MISSING)


def _reference() -> type:
    from lowerd.lowering.optimum_passes import RemovePaddingIdxEmbeddingPass

    return RemovePaddingIdxEmbeddingPass
