"""A recipe target's stages: ExecuTorch's ExportSession pipeline, run stage by stage as lowerd's.

`executorch.export.export(model, example_inputs, recipe)` runs, for an nn.Module, ExportSession's
default pipeline (executorch/export/export.py, stages.py):

    SOURCE_TRANSFORM              torchao quantize_ + unwrap_tensor_subclass (a deep copy)
    QUANTIZE                      strict capture, prepare_pt2e, every example input, convert_pt2e
    TORCH_EXPORT                  torch.export under no_grad, strict as the recipe says
    TO_EDGE_TRANSFORM_AND_LOWER   inside validation_disabled(), the recipe's partitioners
    EDGE_PROGRAM_MANAGER_TRANSFORM   (only when the recipe has edge-manager passes)
    TO_EXECUTORCH                 with the recipe's ExecutorchBackendConfig

lowerd runs ExecuTorch's own Stage classes on ExecuTorch's own recipe object, each as one of its
typed stages (lowering/stages.py), so the bytes are those of `export(...)` while the build keeps
what lowerd adds: progress per stage and method, the program fingerprint and the reuse decision
after TORCH_EXPORT, the partitioners observed (coverage, refusals) and the backends' preprocess
served from the blob cache (lowering/recipe_route.py), emission as every target's.

The example inputs are each method's example args, then the samples the recipe's `calibration`
function returns for it: TORCH_EXPORT exports the first, QUANTIZE calibrates on all.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lowerd.lowering.entry import refuse_keyword_inputs
from lowerd.lowering.export_output import export_output_held
from lowerd.lowering.stages import BuildContext, Loaded
from lowerd.project.errors import (
    BackendUnavailableError,
    EntryError,
    ExportError,
    LowerdError,
    LoweringError,
)
from lowerd.project.method import Method
from lowerd.project.recipe_names import COREML_ENUM_ARGS, coreml_member
from lowerd.project.recipes import RecipeConfig

ExampleInputs = dict[str, list[tuple[Any, ...]]]


def with_recipe(ctx: BuildContext) -> BuildContext:
    """The context of a recipe target with ExecuTorch's recipe for it; any other as it is."""
    if ctx.target.recipe is None:
        return ctx
    ctx = ctx.with_recipe(export_recipe(ctx))
    check_pipeline(ctx)
    return ctx


def export_recipe(ctx: BuildContext) -> Any:
    """ExecuTorch's ExportRecipe for the target's recipe, made as a script makes it:
    `ExportRecipe.get_recipe(<RecipeType>(name), **kwargs)`, or the target recipe's function."""
    declared = _declared(ctx)
    known = declared.known
    if known.backend in ("qnn", "android"):
        _require_qnn_sdk(ctx, declared)
    try:
        module = importlib.import_module(known.module)
    except ImportError as error:
        message = f"recipe {known.name!r}: {known.backend}'s recipes cannot be loaded: {error}"
        raise at_recipe(ctx, BackendUnavailableError, message) from error
    try:
        kwargs = _python_kwargs(declared)
        if known.target_function:
            return getattr(module, known.target_function)(known.name, **kwargs)
        from executorch.export import ExportRecipe

        return ExportRecipe.get_recipe(getattr(module, known.enum)(known.name), **kwargs)
    except Exception as error:
        message = (
            f"ExecuTorch could not make recipe {known.name!r}: {type(error).__name__}: {error}"
        )
        raise at_recipe(ctx, LoweringError, message) from error


def transform_and_quantize(ctx: BuildContext, loaded: Loaded) -> Loaded:
    """SOURCE_TRANSFORM, then QUANTIZE (each only when the recipe has what it runs)."""
    from executorch.export.stages import QuantizeStage, SourceTransformStage

    recipe = ctx.recipe
    why = "executorch.export.export takes example inputs by position"
    refuse_keyword_inputs(loaded.methods, why, ctx.blame.file, ctx.blame.line)
    quantization = recipe.quantization_recipe
    modules = {name: method.module for name, method in loaded.methods.items()}
    if quantization is not None and quantization.ao_quantization_configs:
        ctx.stage("source_transform")
        in_place = recipe.source_transform_in_place
        transform = SourceTransformStage(quantization, in_place=in_place)
        # All methods at once, as ExportSession does: one deep copy keeps shared weights shared.
        modules = _run(ctx, transform, modules, {}, "source transform (torchao quantize_)")
    if quantization is not None and quantization.quantizers:
        inputs = example_inputs(ctx, loaded)
        for name in modules:
            ctx.stage("quantize", name)
            stage = QuantizeStage(quantization)
            done = _run(ctx, stage, {name: modules[name]}, {"example_inputs": inputs}, "quantize")
            modules[name] = done[name]
    return replace(loaded, methods=_with_modules(loaded.methods, modules))


def export_programs(ctx: BuildContext, methods: Mapping[str, Method]) -> dict[str, Any]:
    """TORCH_EXPORT of each method: torch.export under no_grad, strict as the recipe says, with
    the method's dynamic shapes, then the recipe's ATen passes."""
    from executorch.export.stages import TorchExportStage

    recipe = ctx.recipe
    passes = list(recipe.aten_transform_passes) if recipe.aten_transform_passes else None
    programs = {}
    for name, method in methods.items():
        ctx.stage("export", name)
        stage = TorchExportStage(passes, strict=recipe.strict)
        context = {
            "example_inputs": {name: [method.args]},
            "dynamic_shapes": {name: method.dynamic_shapes},
        }
        try:
            with export_output_held():
                stage.run(_artifact({name: method.module}, context))
        except Exception as error:
            doing = f"torch.export of {name!r} (recipe {recipe.name!r}) failed"
            raise ctx.blame(ExportError, error, doing) from error
        programs[name] = stage.get_artifacts().data[name]
    return programs


def example_inputs(ctx: BuildContext, loaded: Loaded) -> ExampleInputs:
    """Each method's example inputs as `export(...)` takes them: its example args, then the
    samples of the recipe's calibration function."""
    from lowerd.lowering.quantize import calibration_samples

    calibration = _declared(ctx).calibration
    names = list(loaded.methods)
    samples = calibration_samples(ctx.config, ctx.target, calibration, names)
    if any(isinstance(sample, dict) for given in samples.values() for sample in given):
        message = "a recipe's calibration samples are tuples of positional inputs, not dicts"
        raise at_recipe(ctx, EntryError, message)
    return {
        name: [method.args, *(s for s in samples.get(name, []) if isinstance(s, tuple))]
        for name, method in loaded.methods.items()
    }


def check_pipeline(ctx: BuildContext) -> None:
    """A recipe that names its own pipeline stages is refused: lowerd runs the default one."""
    stages = ctx.recipe.pipeline_stages
    if stages:
        names = ", ".join(str(getattr(stage, "name", stage)) for stage in stages)
        message = (
            f"recipe {ctx.recipe.name!r} runs its own pipeline ({names}); lowerd runs "
            "ExportSession's default one only"
        )
        raise at_recipe(ctx, LoweringError, message)


def _run(
    ctx: BuildContext, stage: Any, models: dict[str, Any], context: dict[str, Any], doing: str
) -> dict[str, Any]:
    try:
        stage.run(_artifact(models, context))
    except Exception as error:
        what = f"recipe {ctx.recipe.name!r}: {doing} failed"
        raise ctx.blame(LoweringError, error, what) from error
    data: dict[str, Any] = stage.get_artifacts().data
    return data


def _artifact(data: Any, context: dict[str, Any]) -> Any:
    from executorch.export.stages import PipelineArtifact

    return PipelineArtifact(data=data, context=context)


def _with_modules(methods: Mapping[str, Method], modules: Mapping[str, Any]) -> dict[str, Method]:
    return {name: replace(method, module=modules[name]) for name, method in methods.items()}


def at_recipe(ctx: BuildContext, kind: type[LowerdError], message: str) -> LowerdError:
    """An error blamed on the target's recipe line."""
    return kind(message, ctx.config.path, _declared(ctx).line)


def _declared(ctx: BuildContext) -> RecipeConfig:
    declared = ctx.target.recipe
    assert declared is not None, "a recipe stage of a target without a recipe"
    return declared


def _python_kwargs(declared: RecipeConfig) -> dict[str, Any]:
    """The keyword arguments, with CoreML's enums as coremltools' members."""
    kwargs = declared.python_kwargs()
    enums = {name: kwargs[name] for name in COREML_ENUM_ARGS if name in kwargs}
    if enums:
        import coremltools as ct  # type: ignore[import-untyped]

        for name, value in enums.items():
            enum, member = coreml_member(name, value)
            kwargs[name] = getattr(getattr(ct, enum), member)
    return kwargs


def _require_qnn_sdk(ctx: BuildContext, declared: RecipeConfig) -> None:
    """QNN's recipes set up the Qualcomm SDK, downloading it (gigabytes, with retries) when
    QNN_SDK_ROOT is unset: a build does not start a download, it says what to do."""
    if os.environ.get("QNN_SDK_ROOT"):
        return
    message = (
        f"recipe {declared.name!r} needs the Qualcomm QNN SDK: ExecuTorch downloads it when "
        "QNN_SDK_ROOT is unset, which a lowerd build does not do; install the SDK and set "
        "QNN_SDK_ROOT to its folder"
    )
    raise at_recipe(ctx, BackendUnavailableError, message)
