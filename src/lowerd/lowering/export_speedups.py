"""An exact shortcut through torch.export's strict trace, installed only while lowerd exports.

A strict export ends (torch/_dynamo/functional_export.py, `_suggest_or_raise_constraint_violation`)
by building TorchDynamo's guards for the traced frame, only to learn whether the dynamic shapes
violate a constraint, and drops them. Building the shape-env guard (guards.py `SHAPE_ENV`) first
asks the shape env for its guards (`produce_guards_verbose`, which raises the violation and
records the dim constraints export then solves), then turns them into a Python check function:
`build_guard_function` runs a common-subexpression pass over every guard expression (an
`ast.parse` and an `ast.unparse` per sub-expression) before writing an `if not (...): return
False` chain. On optimum's recipe that pass is 1.1-1.5 s CPU of each export at L = 4 and grows
with the layers (each layer's `.item()` adds guards): two strict exports per build.

Skipping the pass is exact: the shortcut writes the same chain without the CSE, which is what
torch itself writes when the pass hits a RecursionError (the fallback in `build_guard_function`).
The two functions return the same answer on every input (CSE only names a repeated
side-effect-free expression once), and export never calls either: CheckFunctionManager checks
its guards on the frame only when `not output_graph.export`, and the manager is dropped. Nothing
of the function reaches the ExportedProgram (graph, signature, metadata, range constraints come
from the capture, not the guards); only guard logs at DEBUG would print other text.
tests/test_export_options.py compares the .pte bytes with the stock script's, with the shortcut
and without it.

It is installed only for the torch version this was checked against (edge_speedups
VALIDATED_VERSIONS); with another, torch's own function runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from lowerd.lowering.edge_speedups import validated_versions

log = logging.getLogger(__name__)


@dataclass
class GuardFunctions:
    """How the check functions of one export were written: `without_cse` by the shortcut,
    `with_cse` by torch's own function (the shortcut not installed)."""

    without_cse: int = 0
    with_cse: int = 0


@contextmanager
def guard_cse_skipped() -> Iterator[GuardFunctions]:
    """torch.export's guard check functions written without their CSE pass while inside."""
    import torch._dynamo.guards as guards

    counts = GuardFunctions()
    real = guards.build_guard_function
    installed = validated_versions()

    def build_guard_function(code_parts: list[str], closure_args: str) -> tuple[str, str]:
        if not installed:
            counts.with_cse += 1
            return real(code_parts, closure_args)
        counts.without_cse += 1
        return _without_cse(code_parts, closure_args)

    guards.build_guard_function = build_guard_function
    try:
        yield counts
    finally:
        guards.build_guard_function = real


def _without_cse(code_parts: list[str], closure_args: str) -> tuple[str, str]:
    """torch 2.13's build_guard_function with its RecursionError fallback (`replace` returning
    each expression as it is), line for line."""
    from torch._inductor.utils import IndentedBuffer

    guard_body = IndentedBuffer()
    for expr in code_parts:
        guard_body.writeline(f"if not ({expr}):")
        with guard_body.indent():
            guard_body.writeline("return False")

    guard = IndentedBuffer()
    guard.writeline("def guard(L):")
    with guard.indent():
        guard.splice(guard_body)
        guard.writeline("return True")

    make_guard_fn = IndentedBuffer()
    make_guard_fn.writeline(f"def ___make_guard_fn({closure_args}):")
    with make_guard_fn.indent():
        make_guard_fn.splice(guard)
        make_guard_fn.writeline("return guard")

    return guard_body.getvalue(), make_guard_fn.getvalue()
