"""The partitioner route: ExecuTorch's to_edge_transform_and_lower, as a stock script calls it.

The partitioners are the backends' (`backends = [...]`, built with the target's options) or the
ones the target's `partitioners` function returns; the target's `transform_passes` run between
edge generation and partitioning. lowerd hands ExecuTorch each partitioner wrapped
(lowering/observed_partitioner.py), to hear the reasons a backend gives for the nodes it leaves
and to report each method as soon as the last partitioner has split it, and speeds up what gives
the same program either way (lowering/edge_speedups.py, xnnpack_passes.py, vulkan_patterns.py,
partition_speedups.py, dtype_checks.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from lowerd.lowering.observed_partitioner import observe
from lowerd.lowering.reasons import PartitionReasons
from lowerd.lowering.route import (
    EdgeProgram,
    EdgeSettings,
    Lowering,
    LoweringProgress,
    backend_display,
)
from lowerd.lowering.stages import BuildContext, Exported
from lowerd.lowering.user_lowering import load_partitioners, load_transform_passes
from lowerd.project.backends import BACKENDS, Backend
from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.errors import BackendUnavailableError

if TYPE_CHECKING:
    from lowerd.lowering.edge_speedups import EdgeSpeedups
    from lowerd.lowering.region_edge import RegionalEdge


@dataclass(frozen=True)
class PartitionerRoute:
    """A target lowered by partitioners: its own (`partitioners`) or its backends'."""

    transform_passes: Any  # what the target's transform_passes function returned; None without
    custom: tuple[Any, ...] | None  # what its partitioners function returned; None: backends'
    displays: tuple[str, ...]

    @classmethod
    def load(cls, ctx: BuildContext) -> PartitionerRoute:
        """The route with the target's own lowering code loaded (its passes, its partitioners):
        the user's code, run while the build records what it reads."""
        transform_passes = load_transform_passes(ctx)
        custom = load_partitioners(ctx)
        if custom is not None:
            displays = tuple(display_of(partitioner) for partitioner in custom)
        else:
            displays = tuple(BACKENDS[name].display for name in ctx.target.backends)
        return cls(transform_passes, custom, displays)

    def prepare(
        self,
        ctx: BuildContext,
        exported: Exported,
        settings: EdgeSettings,
        progress: LoweringProgress,
    ) -> Lowering:
        from lowerd.lowering.edge_speedups import EdgeSpeedups
        from lowerd.lowering.region_edge import RegionalEdge
        from lowerd.lowering.template_store import TemplateStore

        speedups = EdgeSpeedups(ctx.store)
        with speedups.op_table_served():  # ExecuTorch's first import in a process parses it
            from executorch.exir import to_edge_transform_and_lower

        reasons = PartitionReasons()
        partitioners = self._observed(ctx, reasons, list(exported.programs), progress)

        # Transform passes may read any node field, some of which a regional program only
        # makes equivalent (lowering/region_edge.py): with passes not on region_passes.py's
        # allow-list, edge generation is stock's (the run says which).
        regional = RegionalEdge(self.transform_passes, store=TemplateStore(ctx.store))

        def lowering() -> EdgeProgram:
            with edge_speedups(speedups, regional):
                edge = to_edge_transform_and_lower(
                    dict(exported.programs),
                    transform_passes=self.transform_passes,
                    partitioner=partitioners,
                    constant_methods=settings.constant_methods,
                    compile_config=settings.compile_config(),
                    generate_etrecord=settings.generate_etrecord,
                )
            methods = list(exported.programs)
            return EdgeProgram(edge, reasons, edge_generation(regional, methods))

        return lowering

    def _observed(
        self,
        ctx: BuildContext,
        reasons: PartitionReasons,
        methods: list[str],
        progress: LoweringProgress,
    ) -> list[Any]:
        partitioners = self.custom if self.custom is not None else self._backends(ctx)
        return observed_partitioners(ctx, partitioners, self.displays, reasons, methods, progress)

    def _backends(self, ctx: BuildContext) -> tuple[Any, ...]:
        options = ctx.target.backend_options
        backends = [BACKENDS[name] for name in ctx.target.backends]
        return tuple(_partitioner(ctx, b, options.get(b.name)) for b in backends)


@contextmanager
def edge_speedups(speedups: EdgeSpeedups, regional: RegionalEdge | None = None) -> Iterator[None]:
    """What gives the same edge program faster, installed while ExecuTorch lowers; with
    `regional`, edge generation by region (inside the replay skipping, which then applies to each
    region's own run)."""
    from lowerd.lowering.cia_ops import cia_ops_materialized_once
    from lowerd.lowering.dtype_checks import DtypeChecks
    from lowerd.lowering.partition_speedups import PartitionSpeedups
    from lowerd.lowering.vulkan_patterns import pattern_graphs_made_once
    from lowerd.lowering.xnnpack_passes import XnnpackPassSkips

    with (
        speedups.installed(),
        cia_ops_materialized_once(),
        XnnpackPassSkips(speedups.store).installed(),
        PartitionSpeedups().installed(),
        DtypeChecks().installed(),
        pattern_graphs_made_once(),
        regional.installed() if regional is not None else nullcontext(),
    ):
        yield


def edge_generation(regional: RegionalEdge, methods: list[str]) -> dict[str, EdgeGeneration]:
    """Per method, which way edge generation ran: the last run regional generation recorded for
    it (a method's own, or its call's when the call was refused as a whole), its reason the
    gate's words as region_edge.py gives them; none for a method it recorded no run of."""
    generations: dict[str, EdgeGeneration] = {}
    for run in regional.runs:
        if run.stock_because is None:
            generation = EdgeGeneration.regional(run.regions, run.templates, run.reused)
        else:
            generation = EdgeGeneration.stock(run.stock_because, run.regions, run.templates)
        for method in run.methods or methods:  # none named: every method
            if method in methods:
                generations[method] = generation
    return generations


def observed_partitioners(
    ctx: BuildContext,
    partitioners: Sequence[Any],
    displays: tuple[str, ...],
    reasons: PartitionReasons,
    methods: list[str],
    progress: LoweringProgress,
) -> list[Any]:
    """The partitioners as ExecuTorch gets them: each listened to for its reasons, the last one
    (which sees each method's final split into partitions) for its report."""
    on_result = _reporter(ctx, displays, methods, reasons, progress)
    observed = []
    for index, partitioner in enumerate(partitioners):
        display = displays[index]
        reasons.note_configs(partitioner, display)
        last = index == len(partitioners) - 1
        listening = partial(reasons.listening, display)
        observed.append(observe(partitioner, listening, on_result if last else None))
    return observed


def _partitioner(ctx: BuildContext, backend: Backend, options: Any) -> Any:
    """The backend's partitioner; one whose package is not installed (coremltools) is an error
    at the target's table, instead of a traceback from the import."""
    from lowerd.lowering.partitioners import make_partitioner

    try:
        return make_partitioner(backend, options)
    except ImportError as error:
        raise BackendUnavailableError(
            f"{backend.display}'s partitioner cannot be loaded: {error}",
            ctx.config.path,
            ctx.target.line,
        ) from error


def _reporter(
    ctx: BuildContext,
    displays: tuple[str, ...],
    methods: list[str],
    reasons: PartitionReasons,
    progress: LoweringProgress,
) -> Callable[[Any], None]:
    """What the last partitioner's result is given to: the method's report, sent as soon as it
    is partitioned (before the slow preprocess), and its partitions counted for the progress."""
    from lowerd.lowering.report import partitioned_report

    backend, names = displays[-1], list(displays)
    remaining = iter(methods)  # ExecuTorch partitions the methods in order, each once

    def report(result: Any) -> None:
        method = next(remaining, None)
        graph = result.tagged_exported_program.graph_module
        report = partitioned_report(graph, backend, ctx.user_files, reasons, names)
        progress.expect(sum(1 for p in report.partitions if p.backend == backend))
        if method is not None and ctx.on_partitioned is not None:
            ctx.on_partitioned(method, report)

    return report


def display_of(partitioner: Any) -> str:
    """A partitioner's backend as the report names it, by the backend id its delegation spec
    names; a partitioner without one by its class."""
    spec = getattr(partitioner, "delegation_spec", None)
    backend_id = getattr(spec, "backend_id", None)
    return (
        backend_display(backend_id) if isinstance(backend_id, str) else type(partitioner).__name__
    )
