"""The lowering stage: Exported -> Lowered, by the target's route, with what both routes share.

The route (lowering/route.py) turns the exported programs into an edge program with its
delegates; around it, written once here: the backends' preprocess served from the blob cache
(lowering/preprocess_cache.py), the progress of preprocess, a failure blamed at the user's line,
and each method's report from the lowered graph.
"""

from __future__ import annotations

from lowerd.lowering.partitioner_route import PartitionerRoute
from lowerd.lowering.preprocess_cache import PreprocessCache
from lowerd.lowering.rebuild_facts import lowered_partitions
from lowerd.lowering.recipe_route import RecipeRoute
from lowerd.lowering.report import method_report
from lowerd.lowering.route import EdgeSettings, LoweringProgress, LoweringRoute
from lowerd.lowering.stages import BuildContext, Exported, Lowered
from lowerd.lowering.whole_program_route import WholeProgramRoute
from lowerd.project.errors import LowerdError, LoweringError
from lowerd.project.result import CacheSummary


def choose_route(ctx: BuildContext) -> LoweringRoute:
    """The target's route, its own lowering code loaded (the user's code: called while the
    build records what it reads)."""
    if ctx.recipe is not None:
        return RecipeRoute.of(ctx)
    if ctx.target.whole_program:
        return WholeProgramRoute.of(ctx.target.whole_program.value)
    return PartitionerRoute.load(ctx)


def lower(ctx: BuildContext, exported: Exported, route: LoweringRoute) -> Lowered:
    """The exported programs lowered by `route`, the backends' preprocess served from the blob
    cache, each method reported."""
    ctx.stage("partition")
    progress = LoweringProgress(ctx)
    lowering = route.prepare(ctx, exported, EdgeSettings.of(ctx.target), progress)
    preprocess = PreprocessCache(ctx.store, on_preprocess=progress.preprocessed)
    try:
        with preprocess.installed():
            delegated = lowering()
    except LowerdError:
        raise
    except Exception as error:
        raise ctx.blame(LoweringError, error, "ExecuTorch lowering failed") from error
    edge, displays = delegated.edge, list(route.displays)
    reports = {
        name: method_report(
            edge.exported_program(name).graph_module,
            ctx.user_files,
            delegated.reasons,
            preprocess,
            displays,
        )
        for name in exported.programs
    }
    for name, report in reports.items():
        report.edge_generation = delegated.generation.get(name)
    cache = CacheSummary(preprocess.hits, preprocess.misses, preprocess.rebased)
    partitions = tuple(lowered_partitions(edge, reports, preprocess))
    return Lowered(edge, reports, cache, partitions)
