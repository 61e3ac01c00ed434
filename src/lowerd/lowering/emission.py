"""The emission stage: Lowered -> Emitted, ExecuTorch's to_executorch with the target's config.

What the stock script writes, in memory: the .pte's bytes, and the files that go beside it (what
ExecutorchProgramManager.write_tensor_data_to_file writes, one .ptd per tag of its external data,
and the ETRecord when the target asks for one), with what the program costs on a device.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lowerd.lowering.stages import BuildContext, DataBytes, Emitted, Lowered
from lowerd.project.build_state import data_file_path
from lowerd.project.compile_configs import SYM_SHAPE_EVAL_PASSES
from lowerd.project.config import TargetConfig
from lowerd.project.errors import LoweringError
from lowerd.project.lowering_options import Options
from lowerd.project.report_model import MethodReport
from lowerd.project.result import ProgramSizes


def emit(ctx: BuildContext, lowered: Lowered) -> Emitted:
    """The program emitted: its bytes, its data files' bytes, its sizes on each report."""
    ctx.stage("emit")
    from lowerd.lowering.emit_speedups import emit_speedups

    try:
        with emit_speedups():
            manager = lowered.edge.to_executorch(_backend_config(ctx))
        buffer = bytes(manager.buffer)
    except Exception as error:
        raise ctx.blame(LoweringError, error, "ExecuTorch emission failed") from error
    sizes, reports = _sized(manager, len(buffer), lowered.reports)
    from lowerd.lowering.loadability import program_needs

    return Emitted(
        manager=manager,
        buffer=buffer,
        data_files=_data_files(ctx, manager),
        sizes=sizes,
        reports=reports,
        cache=lowered.cache,
        partitions=lowered.partitions,
        needs=program_needs(manager.executorch_program, buffer),
        edge=lowered.edge,
    )


def _backend_config(ctx: BuildContext) -> Any:
    """The target's ExecutorchBackendConfig; a recipe target's is its recipe's (None:
    to_executorch's default, as ExportSession's TO_EXECUTORCH stage passes it)."""
    if ctx.recipe is not None:
        return ctx.recipe.executorch_backend_config
    return backend_config(ctx.target)


def backend_config(target: TargetConfig) -> Any:
    """The target's ExecutorchBackendConfig: its plain fields, and the memory planning and shape
    evaluation passes its keys name (made afresh: a MemoryPlanningPass keeps state). Without
    them, ExecuTorch's defaults: ExecutorchBackendConfig() is to_executorch's own."""
    from executorch.exir import ExecutorchBackendConfig

    passes = {}
    if target.memory_planning:
        passes["memory_planning_pass"] = _memory_planning_pass(target.memory_planning)
    if target.sym_shape_eval:
        from executorch.exir.passes import sym_shape_eval_pass

        pass_class = getattr(sym_shape_eval_pass, SYM_SHAPE_EVAL_PASSES[target.sym_shape_eval])
        passes["sym_shape_eval_pass"] = pass_class()
    return ExecutorchBackendConfig(**target.executorch_backend_config, **passes)


def _memory_planning_pass(arguments: Options) -> Any:
    """MemoryPlanningPass(...), its algorithm named: memory_planning_algo = "naive" is
    MemoryPlanningAlgorithmSuite(algo_list=[naive])."""
    from executorch.exir import memory_planning
    from executorch.exir.passes import MemoryPlanningPass

    given: dict[str, Any] = dict(arguments)
    algorithm = given.pop("memory_planning_algo", None)
    if algorithm is not None:
        given["memory_planning_algo"] = memory_planning.MemoryPlanningAlgorithmSuite(
            algo_list=[getattr(memory_planning, str(algorithm))]
        )
    return MemoryPlanningPass(**given)


def _sized(
    manager: Any, pte_bytes: int, reports: Mapping[str, MethodReport]
) -> tuple[ProgramSizes, dict[str, MethodReport]]:
    """The program's sizes, and the reports with each method's planned memory and constants."""
    from lowerd.lowering.program_sizes import program_sizes

    sizes, methods = program_sizes(manager, pte_bytes)
    sized = {}
    for name, report in reports.items():
        method = methods.get(name)
        if method is None:
            sized[name] = report
            continue
        sized[name] = replace(
            report,
            planned_memory_bytes=method.planned_memory_bytes,
            constant_bytes=method.constant_bytes,
        )
    return sizes, sized


def _data_files(ctx: BuildContext, manager: Any) -> tuple[DataBytes, ...]:
    """One .ptd per tag of the program's external data, as write_tensor_data_to_file names
    them, then the ETRecord."""
    files = []
    for tag, cord in sorted((manager._tensor_data or {}).items()):
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", tag):
            doing = f"external data tag {tag!r} names no file"
            raise ctx.blame(LoweringError, ValueError(tag), doing)
        path = data_file_path(ctx.config, ctx.target, "ptd", tag)
        files.append(DataBytes(path, bytes(cord), "ptd"))
    if ctx.target.etrecord:
        etrecord = io.BytesIO()
        try:
            manager.get_etrecord().save(etrecord)
        except Exception as error:
            raise ctx.blame(LoweringError, error, "saving the ETRecord failed") from error
        path = data_file_path(ctx.config, ctx.target, "etrecord")
        files.append(DataBytes(path, etrecord.getvalue(), "etrecord"))
    return tuple(files)
