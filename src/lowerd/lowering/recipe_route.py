"""The recipe route: a recipe target's lowering, ExecuTorch's EdgeTransformAndLowerStage with the
recipe's partitioners, edge passes and EdgeCompileConfig (and, when the recipe has edge-manager
passes, its EdgeProgramManagerTransformStage), as `executorch.export.export(...)` runs them.

The stages are ExecuTorch's own (executorch/export/stages.py: `validation_disabled()`, the
per-method edge passes resolved as ExportSession resolves them); lowerd hands them the recipe's
partitioners observed (lowering/observed_partitioner.py) for the report and the progress, and
runs them inside what lower.py installs around every route: the blob cache of preprocess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lowerd.lowering.partitioner_route import display_of, edge_speedups, observed_partitioners
from lowerd.lowering.reasons import PartitionReasons
from lowerd.lowering.recipe import at_recipe
from lowerd.lowering.route import (
    EdgeProgram,
    EdgeSettings,
    Lowering,
    LoweringProgress,
    stock_edge_generation,
)
from lowerd.lowering.stages import BuildContext, Exported
from lowerd.project.errors import LoweringError

# Why its edge generation is stock's: regional generation is installed on the partitioner route.
RECIPE_STOCK = "a recipe target: ExecuTorch's recipe stages generate the edge program"


@dataclass(frozen=True)
class RecipeRoute:
    """A target lowered as its ExecuTorch recipe says (BuildContext.recipe)."""

    lowering_recipe: Any  # the recipe's LoweringRecipe; None: to_edge without partitioners
    partitioners: tuple[Any, ...]
    displays: tuple[str, ...]

    @classmethod
    def of(cls, ctx: BuildContext) -> RecipeRoute:
        lowering_recipe = ctx.recipe.lowering_recipe
        partitioners = lowering_recipe.partitioners if lowering_recipe else None
        if isinstance(partitioners, dict):
            message = f"recipe {ctx.recipe.name!r} gives partitioners by method: not lowered"
            raise at_recipe(ctx, LoweringError, message)
        given = tuple(partitioners or ())
        return cls(lowering_recipe, given, tuple(display_of(p) for p in given))

    def prepare(
        self,
        ctx: BuildContext,
        exported: Exported,
        settings: EdgeSettings,
        progress: LoweringProgress,
    ) -> Lowering:
        from executorch.export.stages import (
            EdgeProgramManagerTransformStage,
            EdgeTransformAndLowerStage,
            PipelineArtifact,
        )

        from lowerd.lowering.edge_speedups import EdgeSpeedups

        reasons = PartitionReasons()
        methods = list(exported.programs)
        observed = observed_partitioners(
            ctx, self.partitioners, self.displays, reasons, methods, progress
        )
        recipe = self.lowering_recipe
        stage = EdgeTransformAndLowerStage()  # as from_recipe makes it, the partitioners observed
        if recipe is not None:
            stage = EdgeTransformAndLowerStage(
                partitioners=observed if recipe.partitioners is not None else None,
                transform_passes=recipe.edge_transform_passes,
                compile_config=recipe.edge_compile_config,
            )
        context = {
            "constant_methods": settings.constant_methods,
            "generate_etrecord": settings.generate_etrecord,
        }
        manager_passes = recipe is not None and recipe.edge_manager_transform_passes
        speedups = EdgeSpeedups(ctx.store)

        def lowering() -> EdgeProgram:
            with edge_speedups(speedups):
                stage.run(PipelineArtifact(data=dict(exported.programs), context=context))
            artifact = stage.get_artifacts()
            if manager_passes:
                transform = EdgeProgramManagerTransformStage.from_recipe(recipe)
                transform.run(artifact)
                artifact = transform.get_artifacts()
            generation = stock_edge_generation(exported.programs, RECIPE_STOCK)
            return EdgeProgram(artifact.data, reasons, generation)

        return lowering
