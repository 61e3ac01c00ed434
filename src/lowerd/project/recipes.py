"""[tool.lowerd.targets.T] recipe: one of ExecuTorch's export recipes, as the target's whole
lowering (`executorch.export.export(model, example_inputs, recipe)`).

    recipe = "xnnpack_fp32"
    recipe = { name = "xnnpack_torchao_int8da_int4w_per_tensor", group_size = 64 }
    [tool.lowerd.targets.T.recipe]
    name = "xnnpack_pt2e_int8_static_per_tensor"
    calibration = "models/data.py:samples"   # more example inputs, each calibrates

A table's `name` and `calibration` are lowerd's; every other key is a keyword argument of the
recipe (project/recipe_names.py lists each recipe's). The recipe says how the target is
quantized, exported, partitioned and emitted, so a recipe target sets none of the keys that say
it otherwise (check_recipe_target), and [tool.lowerd]'s defaults for them do not reach it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeAlias

from lowerd.project.config_reader import KeyReader, Table, describe, did_you_mean
from lowerd.project.config_values import positive_int, reference
from lowerd.project.export_options import ExportConfig
from lowerd.project.located import Located
from lowerd.project.recipe_names import RECIPES, SET_ARGS, KnownRecipe, RecipeArg
from lowerd.project.toml_lines import KeyPath

RecipeValue: TypeAlias = bool | int | str | list[int] | list[str]
LOWERD_KEYS = ("name", "calibration")

# Target keys that say what the recipe says: (key, what the recipe decides instead).
_REPLACED_BY_RECIPE = (
    ("quantize", "the recipe quantizes as it says"),
    ("transform_passes", "the recipe gives its own edge passes"),
    ("edge_compile_config", "the recipe gives its own EdgeCompileConfig"),
    ("executorch_backend_config", "the recipe gives its own ExecutorchBackendConfig"),
    ("external_constants", "the recipe gives its own ExecutorchBackendConfig"),
    ("backend_options", "the recipe makes its own partitioners"),
    ("export", "the recipe exports as it says"),
    ("memory_planning", "the recipe gives its own ExecutorchBackendConfig"),
    ("sym_shape_eval", "the recipe gives its own ExecutorchBackendConfig"),
)


def recipe_clears() -> dict[str, object]:
    """The target's fields a recipe replaces, emptied: [tool.lowerd]'s values for them do not
    reach a recipe target (nor its inputs digest, nor its program fingerprint)."""
    return {
        "backends": (),
        "backend_options": {},
        "edge_compile_config": {},
        "executorch_backend_config": {},
        "export": ExportConfig(),
        "memory_planning": {},
        "sym_shape_eval": None,
    }


@dataclass(frozen=True)
class RecipeConfig:
    """The target's recipe: its name, its keyword arguments as written, the calibration
    function whose samples follow the entry's example args, and the line to blame."""

    name: str
    kwargs: dict[str, RecipeValue] = field(hash=False)
    calibration: Located[str] | None
    line: int

    @property
    def known(self) -> KnownRecipe:
        return RECIPES[self.name]

    def python_kwargs(self) -> dict[str, Any]:
        """The keyword arguments as the recipe takes them, but the coremltools enum members
        (made where coremltools is imported): a list given as a set where ExecuTorch wants one."""
        return {
            k: set(v) if k in SET_ARGS and isinstance(v, list) else v
            for k, v in self.kwargs.items()
        }

    def to_json(self) -> dict[str, object]:
        """As written: the name, the keyword arguments, the calibration if any."""
        shown: dict[str, object] = {"name": self.name, **self.kwargs}
        if self.calibration is not None:
            shown["calibration"] = self.calibration.value
        return shown


def recipe(reader: KeyReader, value: object, key: KeyPath) -> RecipeConfig:
    """`recipe = "name"` or a table of `name`, `calibration` and the recipe's arguments."""
    example = (
        '"xnnpack_fp32" or { name = "xnnpack_torchao_int8da_int4w_per_tensor", group_size = 32 }'
    )
    if isinstance(value, str):
        return RecipeConfig(_name(reader, value, key), {}, None, reader.line(key) or 1)
    if not isinstance(value, dict):
        raise reader.error(
            f"recipe must be a recipe name or a table like {example}, got {describe(value)}", key
        )
    line = reader.locator.header_line(key) or reader.line(key) or 1
    if "name" not in value:
        raise reader.error(f"recipe has no name; write {example}", key)
    name = _name(reader, value["name"], (*key, "name"))
    known = RECIPES[name]
    reader.check_keys(value, (*LOWERD_KEYS, *known.args), key, f"recipe {name!r}")
    kwargs = {
        arg: _argument(reader, arg, item, known.args[arg], (*key, arg))
        for arg, item in value.items()
        if arg not in LOWERD_KEYS
    }
    for arg, kind in known.args.items():
        if kind.required and arg not in kwargs:
            raise reader.error(f"recipe {name!r} needs {arg} ({kind.describe()})", key)
    return RecipeConfig(name, kwargs, _calibration(reader, value, key, known, line), line)


def _name(reader: KeyReader, value: object, key: KeyPath) -> str:
    if not isinstance(value, str):
        raise reader.error(f"a recipe's name is a string, got {describe(value)}", key)
    if value not in RECIPES:
        hint = did_you_mean(value, RECIPES)
        raise reader.error(
            f"unknown recipe {value!r}{hint}; ExecuTorch's recipes: {', '.join(RECIPES)}", key
        )
    return value


def _calibration(
    reader: KeyReader, table: Table, key: KeyPath, known: KnownRecipe, line: int
) -> Located[str] | None:
    if table.get("calibration") is None:
        return None
    calibration_key = (*key, "calibration")
    if not known.calibrates:
        raise reader.error(
            f"recipe {known.name!r} has no PT2E quantizer to calibrate; drop calibration",
            calibration_key,
        )
    checked = reference(reader, table["calibration"], calibration_key)
    return Located(checked, reader.line(calibration_key) or line)


def _argument(
    reader: KeyReader, name: str, value: object, kind: RecipeArg, key: KeyPath
) -> RecipeValue:
    wrong = reader.error(f"{name} must be {kind.describe()}, got {describe(value)}", key)
    if kind.kind == "bool" and isinstance(value, bool):
        return value
    if kind.kind == "int" and positive_int(value):
        return value
    if kind.kind == "text" and isinstance(value, str):
        return value
    if kind.kind == "choice" and isinstance(value, str):
        reader.check_name(name, value, kind.choices, key)
        return value
    if kind.kind == "texts" and isinstance(value, list):
        if all(isinstance(item, str) for item in value):
            return list(value)
    if kind.kind == "ints" and isinstance(value, list):
        if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
            return list(value)
    raise wrong


def check_recipe_target(reader: KeyReader, table: Table, key: KeyPath) -> None:
    """A recipe target sets none of the keys that say what its recipe says."""
    if "recipe" not in table:
        return
    for name, why in _REPLACED_BY_RECIPE:
        if name in table:
            raise reader.error(
                f"{name} does not apply to a recipe target ({why}): drop {name} or recipe",
                (*key, name),
            )
