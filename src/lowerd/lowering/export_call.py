"""torch.export of one method, called as the target's `[..export]` table says.

What a script written the way optimum-executorch exports an LLM does (its integrations.py):

    with torch.no_grad():                                  # no_grad = true
        ep = torch.export.export(module, args, kwargs, dynamic_shapes=shapes, strict=True)
        graph = ep.module()                                # module_passes = "file.py:fn"
        for module_pass in passes():
            graph = module_pass(graph)[0]                  # a PassResult, or a GraphModule
        ep = torch.export.export(graph, args, kwargs, dynamic_shapes=shapes, strict=True)

The lowering that follows runs outside the no_grad block, in the process's grad mode, as optimum's
does: lowering under no_grad gives other bytes.

The second export runs whenever module passes are given, even when they change nothing, as the
stock script runs it: export(ep.module()) is another program than ep (node names, signature,
state-dict order, module call graph; source_fn_stack, torch_fn, stack_trace metadata, which
XNNPACK's partitioner reads), so reusing ep would be exact by measurement only (docs/cache.md,
"Export is not memoized"; bench/bench_export.py --unchanged).

Each export runs with export_speedups.py's guard shortcut installed (exact: the guard function
export writes and drops, without its CSE pass).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lowerd.lowering.blame import Blame
from lowerd.lowering.export_output import export_output_held
from lowerd.lowering.export_speedups import guard_cse_skipped
from lowerd.project.errors import EntryError, ExportError
from lowerd.project.export_options import ExportConfig
from lowerd.project.method import Method

log = logging.getLogger(__name__)

# A callable of a module_passes function's list: GraphModule -> GraphModule or PassResult.
ModulePass = Callable[[Any], Any]


@dataclass(frozen=True)
class ModulePasses:
    """What the target's `module_passes` function returned, and the config line naming it
    (where a pass that returns no graph is blamed)."""

    passes: tuple[ModulePass, ...]
    reference: str
    file: str
    line: int


def export_method(
    method: Method,
    settings: ExportConfig,
    blame: Blame,
    doing: str,
    module_passes: ModulePasses | None = None,
    before_passes: Callable[[Any], None] | None = None,
) -> Any:
    """The method's ExportedProgram; a failure is an ExportError (`doing` says which export),
    a module pass that fails or returns no graph an EntryError, each at the user's line.
    `before_passes` is shown the first export before the module passes run (it may raise)."""
    import torch

    grad = torch.no_grad() if settings.no_grad else contextlib.nullcontext()
    with grad:
        program = _export(method.module, method, settings, blame, doing)
        if not module_passes:
            return program
        if before_passes is not None:
            before_passes(program)
        graph = program.module()
        for index in range(len(module_passes.passes)):
            graph = _run_pass(module_passes, index, graph, blame)
        return _export(graph, method, settings, blame, f"{doing} (after module_passes)")


def _export(module: Any, method: Method, settings: ExportConfig, blame: Blame, doing: str) -> Any:
    import torch

    try:
        # torch's own account of a failure: ours says it; guard functions, which export drops,
        # written without their CSE pass (export_speedups.py)
        with export_output_held(), guard_cse_skipped() as guards:
            program = torch.export.export(
                module,
                method.args,
                dict(method.kwargs),
                dynamic_shapes=method.dynamic_shapes,
                strict=settings.strict,
            )
    except Exception as error:
        raise blame(ExportError, error, doing) from error
    if guards.without_cse or guards.with_cse:
        log.debug(
            "export of a %s: %d guard functions written without CSE, %d with torch's",
            type(module).__name__,
            guards.without_cse,
            guards.with_cse,
        )
    return program


def _run_pass(module_passes: ModulePasses, index: int, graph: Any, blame: Blame) -> Any:
    """The graph module a pass gives back: its return value, or the first item of the
    PassResult (graph_module, modified) ExecuTorch's passes return."""
    import torch

    module_pass = module_passes.passes[index]
    name = getattr(module_pass, "__name__", type(module_pass).__name__)
    what = f"module pass {index} ({name}) of {module_passes.reference}"
    try:
        returned = module_pass(graph)
    except Exception as error:
        raise blame(EntryError, error, f"{what} raised") from error
    result = returned[0] if isinstance(returned, tuple) and returned else returned
    if not isinstance(result, torch.fx.GraphModule):
        raise EntryError(
            f"{what} returned a {type(returned).__name__}; a module pass returns a GraphModule "
            "or a PassResult",
            module_passes.file,
            module_passes.line,
        )
    return result
