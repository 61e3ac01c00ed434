"""The whole-program route: each method lowered whole to one backend, as ExecuTorch documents it.

For a backend that takes a whole program rather than partitions: `to_edge`, then
`backend_api.to_backend(backend_id, edge.exported_program(method), compile_specs)` per method, the
lowered module called by a small module that is exported and taken to edge again (to_executorch
follows, in emission.py). The target's `whole_program = {backend_id, compile_specs}` names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lowerd.lowering.entry import refuse_keyword_inputs
from lowerd.lowering.reasons import PartitionReasons
from lowerd.lowering.route import (
    EdgeProgram,
    EdgeSettings,
    Lowering,
    LoweringProgress,
    backend_display,
    stock_edge_generation,
)
from lowerd.lowering.stages import BuildContext, Exported
from lowerd.project.errors import LoweringError
from lowerd.project.lowering_options import WholeProgram
from lowerd.project.method import Method

# Why its edge generation is stock's: to_edge, not the partitioner route regional generation joins.
WHOLE_PROGRAM_STOCK = "whole_program lowers by to_edge"


class Composite(torch.nn.Module):
    """The documented composite: a module whose forward calls the lowered module."""

    def __init__(self, lowered_module: Any):
        super().__init__()
        self.lowered_module = lowered_module

    def forward(self, *args: Any) -> Any:
        return self.lowered_module(*args)


@dataclass(frozen=True)
class WholeProgramRoute:
    """A target whose `whole_program` names the backend each method is lowered to whole."""

    backend_id: str
    compile_specs: dict[str, str]

    @classmethod
    def of(cls, whole_program: WholeProgram) -> WholeProgramRoute:
        return cls(whole_program["backend_id"], dict(whole_program["compile_specs"]))

    @property
    def displays(self) -> tuple[str, ...]:
        return (backend_display(self.backend_id),)

    def prepare(
        self,
        ctx: BuildContext,
        exported: Exported,
        settings: EdgeSettings,
        progress: LoweringProgress,
    ) -> Lowering:
        from lowerd.lowering.edge_speedups import EdgeSpeedups

        with EdgeSpeedups(ctx.store).op_table_served():
            from executorch.exir import to_edge
        from executorch.exir.backend.backend_api import to_backend
        from executorch.exir.backend.compile_spec_schema import CompileSpec

        why = "whole_program calls the lowered program from a module taking positional inputs"
        refuse_keyword_inputs(exported.methods, why, ctx.blame.file, ctx.blame.line)
        specs = [CompileSpec(key, value.encode()) for key, value in self.compile_specs.items()]
        progress.expect(len(exported.programs))  # a partition per method

        def lowering() -> EdgeProgram:
            edge = to_edge(dict(exported.programs), compile_config=settings.compile_config())
            composites = {}
            for name in exported.programs:
                try:
                    lowered = to_backend(self.backend_id, edge.exported_program(name), specs)
                except Exception as error:
                    doing = f"{self.displays[0]} refused method {name!r}"
                    raise ctx.blame(LoweringError, error, doing) from error
                composites[name] = _composite(lowered, exported.methods[name])
            whole = to_edge(
                composites,
                constant_methods=settings.constant_methods,
                compile_config=settings.compile_config(),
                generate_etrecord=settings.generate_etrecord,
            )
            generation = stock_edge_generation(exported.programs, WHOLE_PROGRAM_STOCK)
            return EdgeProgram(whole, PartitionReasons(), generation)

        return lowering


def _composite(lowered: Any, method: Method) -> Any:
    """The composite module calling `lowered`, exported with the method's arguments."""
    return torch.export.export(
        Composite(lowered), method.args, dynamic_shapes=_var_positional_shapes(method)
    )


def _var_positional_shapes(method: Method) -> Any:
    """The method's dynamic shapes for a `forward(*args)` that takes its arguments in order:
    one entry, `args`, holding a shape per positional argument. A dict keyed by the original
    forward's parameter names is put in that order."""
    import inspect

    shapes = method.dynamic_shapes
    if shapes is None:
        return None
    if isinstance(shapes, dict):
        names = list(inspect.signature(method.module.forward).parameters)[: len(method.args)]
        shapes = tuple(shapes.get(name) for name in names)
    return {"args": tuple(shapes)}
