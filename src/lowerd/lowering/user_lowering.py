"""The user's own lowering code a target names: its `transform_passes`, `partitioners` and
`export.module_passes` functions.

Each is a "file.py:fn" reference, imported as the entry is (its module is a recorded input) and
called once per build; what it returns is handed to to_edge_transform_and_lower as a script
would hand it. A function that raises, or returns what ExecuTorch cannot take, is blamed at the
user's line, not deep inside ExecuTorch.
"""

from __future__ import annotations

from typing import Any

from lowerd.lowering.entry import UserFunction, find_function
from lowerd.lowering.export_call import ModulePasses
from lowerd.lowering.stages import BuildContext
from lowerd.project.errors import EntryError
from lowerd.project.located import Located


def load_transform_passes(ctx: BuildContext) -> Any:
    """What the target's `transform_passes = "file.py:fn"` function returns (passes for
    to_edge_transform_and_lower); None without one."""
    reference = ctx.target.transform_passes
    if not reference:
        return None
    _, passes = _called(ctx, reference, "transform_passes")
    if passes is None:
        raise EntryError(
            f"transform_passes {reference.value} returned None; it returns a list of passes",
            ctx.config.path,
            reference.line,
        )
    return passes


def load_partitioners(ctx: BuildContext) -> tuple[Any, ...] | None:
    """What the target's `partitioners = "file.py:fn"` function returns: Partitioner instances;
    None without one."""
    reference = ctx.target.partitioners
    if not reference:
        return None
    found, partitioners = _called(ctx, reference, "partitioners")
    from executorch.exir.backend.partitioner import Partitioner  # not before a refusal's

    if (
        not isinstance(partitioners, list | tuple)
        or not partitioners
        or not all(isinstance(p, Partitioner) for p in partitioners)
    ):
        got = (
            f"a {type(partitioners).__name__}"
            if not isinstance(partitioners, list | tuple)
            else "[" + ", ".join(type(p).__name__ for p in partitioners) + "]"
        )
        raise EntryError(
            f"partitioners {reference.value} returned {got}; it returns a non-empty list of "
            "Partitioner instances, like [XnnpackPartitioner()]",
            found.file,
            found.line,
        )
    return tuple(partitioners)


def load_module_passes(ctx: BuildContext) -> ModulePasses | None:
    """What the target's `export.module_passes = "file.py:fn"` function returns: callables
    applied to each exported program's module before it is exported again; None without one."""
    reference = ctx.target.export.module_passes
    if not reference:
        return None
    found, passes = _called(ctx, reference, "module_passes")
    wrong = _not_callables(passes)
    if wrong:
        raise EntryError(
            f"module_passes {reference.value} returned {wrong}; it returns a list of callables "
            "taking and returning a GraphModule, like [RemoveRedundantTransposes()]",
            found.file,
            found.line,
        )
    return ModulePasses(tuple(passes), reference.value, str(ctx.config.path), reference.line)


def _called(ctx: BuildContext, reference: Located[str], role: str) -> tuple[UserFunction, Any]:
    """The function a target's `role = "file.py:fn"` names, and what it returned; one that
    raises is blamed at the user's line that raised."""
    found = find_function(ctx.config, ctx.target, reference, role)
    try:
        return found, found.function()
    except Exception as error:
        raise ctx.blame(EntryError, error, f"{role} {reference.value} raised") from error


def _not_callables(passes: Any) -> str | None:
    """What is wrong with a module_passes function's return value, or None."""
    if not isinstance(passes, list | tuple):
        return f"a {type(passes).__name__}"
    for index, item in enumerate(passes):
        if not callable(item):
            return f"a list whose item {index} is a {type(item).__name__}, not a callable"
    return None
