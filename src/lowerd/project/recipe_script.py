"""The part of a recipe target's stock script after its entry is loaded: ExecuTorch's recipe made
as a script makes it, then `executorch.export.export(model, example_inputs, recipe)`, which runs
the whole pipeline (project/reproducer.py writes the rest: the entry, the files).

    recipe = ExportRecipe.get_recipe(XNNPackRecipeType("xnnpack_fp32"))
    session = export(modules, example_inputs, recipe, dynamic_shapes=..., ...)
    manager = session.get_executorch_program_manager()

The example inputs of each method are its example args, then its calibration samples.
"""

from __future__ import annotations

from lowerd.project.config import TargetConfig
from lowerd.project.python_literal import identifier, literal
from lowerd.project.recipe_names import COREML_ENUM_ARGS, SET_ARGS, coreml_member
from lowerd.project.recipes import RecipeConfig, RecipeValue

_EXPORT = """
from executorch.export import ExportRecipe, export
{imports}
recipe = {recipe}
samples = {samples}
if not isinstance(samples, dict):
    samples = {{name: samples for name in methods}}
modules, example_inputs, dynamic_shapes = {{}}, {{}}, {{}}
for name, method in methods.items():
    module, args, _, shapes = inputs(method)  # by position: export() takes no keywords
    modules[name] = module
    example_inputs[name] = [args, *samples.get(name, [])]  # [0] exported, all calibrate
    if shapes is not None:
        dynamic_shapes[name] = shapes
session = export(
    modules,
    example_inputs,
    recipe,
    dynamic_shapes=dynamic_shapes,
    constant_methods={constant_methods},
    generate_etrecord={etrecord},
)
manager = session.get_executorch_program_manager()
"""


def recipe_export(target: TargetConfig, declared: RecipeConfig) -> str:
    known = declared.known
    imports = []
    if any(name in COREML_ENUM_ARGS for name in declared.kwargs):
        imports.append("import coremltools as ct")
    if known.target_function:
        imports.append(f"from {known.module} import {known.target_function}")
        made = f"{known.target_function}({_arguments(literal(known.name), declared)})"
    else:
        imports.append(f"from {known.module} import {known.enum}")
        recipe_type = f"{known.enum}({literal(known.name)})"
        made = f"ExportRecipe.get_recipe({_arguments(recipe_type, declared)})"
    calibration = declared.calibration
    return _EXPORT.format(
        imports="\n".join(imports) + "\n",
        recipe=made,
        samples=f"load({literal(calibration.value)})()" if calibration else "{}",
        constant_methods=literal(target.constant_methods or None),
        etrecord=literal(target.etrecord),
    )


def _arguments(first: str, declared: RecipeConfig) -> str:
    keywords = [
        f"{identifier(name)}={_value(name, value)}" for name, value in declared.kwargs.items()
    ]
    return ", ".join([first, *keywords])


def _value(name: str, value: RecipeValue) -> str:
    """A keyword argument as the recipe takes it: coremltools' enum members, Python sets."""
    if name in COREML_ENUM_ARGS:
        enum, member = coreml_member(name, value)
        return f"ct.{identifier(enum)}.{identifier(member)}"
    if name in SET_ARGS:
        return f"set({literal(value)})"
    return literal(value)
