"""The user's own lowering code a target names: its `transform_passes` and `partitioners` functions.

Each is a "file.py:fn" reference, imported as the entry is (its module is a recorded input) and
called once per build; what it returns is handed to to_edge_transform_and_lower as a script
would hand it. A function that raises, or returns what ExecuTorch cannot take, is blamed at the
user's line, not deep inside ExecuTorch.
"""

from __future__ import annotations

from typing import Any

from lowerd.lowering.entry import definition_site, find_function
from lowerd.lowering.stages import BuildContext
from lowerd.project.errors import EntryError


def load_transform_passes(ctx: BuildContext) -> Any:
    """What the target's `transform_passes = "file.py:fn"` function returns (passes for
    to_edge_transform_and_lower); None without one."""
    reference = ctx.target.transform_passes
    if not reference:
        return None
    function = find_function(ctx.config, ctx.target, reference, "transform_passes")
    try:
        passes = function()
    except Exception as error:
        raise ctx.blame(EntryError, error, f"transform_passes {reference.value} raised") from error
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
    from executorch.exir.backend.partitioner import Partitioner

    function = find_function(ctx.config, ctx.target, reference, "partitioners")
    try:
        partitioners = function()
    except Exception as error:
        raise ctx.blame(EntryError, error, f"partitioners {reference.value} raised") from error
    if (
        not isinstance(partitioners, list | tuple)
        or not partitioners
        or not all(isinstance(p, Partitioner) for p in partitioners)
    ):
        file, def_line = definition_site(function)
        got = (
            f"a {type(partitioners).__name__}"
            if not isinstance(partitioners, list | tuple)
            else "[" + ", ".join(type(p).__name__ for p in partitioners) + "]"
        )
        raise EntryError(
            f"partitioners {reference.value} returned {got}; it returns a non-empty list of "
            "Partitioner instances, like [XnnpackPartitioner()]",
            file or ctx.config.path,
            def_line if file else reference.line,
        )
    return tuple(partitioners)
