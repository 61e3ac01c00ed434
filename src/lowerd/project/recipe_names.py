"""ExecuTorch's export recipes by the names its recipe registry knows them by, with the keyword
arguments each takes: what `[tool.lowerd.targets.T] recipe = "..."` is checked against without
importing torch or ExecuTorch.

A backend's recipes are its `RecipeType` enum's values (`XNNPackRecipeType.FP32.value` is
"xnnpack_fp32"); its package registers the provider that makes them when imported
(`executorch.backends.xnnpack.recipes`). The target recipes of `executorch.export.target_recipes`
(`get_ios_recipe("ios-arm64-coreml-fp16")`, `get_android_recipe(...)`) combine several backends'
and are named by their target config. tests/test_recipes.py compares these lists with
ExecuTorch's enums and providers, so drift is caught.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lowerd.project.backends import COREML_COMPUTE_UNITS, COREML_DEPLOYMENT_TARGETS


@dataclass(frozen=True)
class RecipeArg:
    """A keyword argument of a recipe: "bool", "int" (positive), "choice" (one of `choices`),
    "text", "texts" (a list of strings) or "ints" (a list of integers)."""

    kind: str
    choices: tuple[str, ...] = ()
    required: bool = False

    def describe(self) -> str:
        return {
            "bool": "true or false",
            "int": "a positive integer",
            "choice": f"one of {', '.join(self.choices)}",
            "text": "a string",
            "texts": "an array of strings",
            "ints": "an array of integers",
        }[self.kind]


@dataclass(frozen=True)
class KnownRecipe:
    """A recipe ExecuTorch makes: `ExportRecipe.get_recipe(<enum>(name), **kwargs)` once
    `module` is imported, or a target recipe's function (`target_function(name, **kwargs)`)."""

    name: str
    backend: str  # the provider's backend name, or the target's platform ("ios", "android")
    module: str  # the module that defines the RecipeType and registers the provider
    enum: str  # the RecipeType class in `module`; "" for a target recipe
    args: Mapping[str, RecipeArg] = field(hash=False)
    calibrates: bool = False  # it has a PT2E quantizer: every example input calibrates it
    target_function: str = ""  # in executorch.export.target_recipes, for a target recipe


_BOOL = RecipeArg("bool")
_INT = RecipeArg("int")

# CoreMLRecipeProvider._get_expected_keys's common keys (filter_fn, a function, is left out:
# a config cannot hold one). compute_unit and minimum_deployment_target are written as
# [..backend_options.coreml] writes them and given as ct.ComputeUnit / ct.target members.
_COREML_ARGS: dict[str, RecipeArg] = {
    "minimum_deployment_target": RecipeArg("choice", COREML_DEPLOYMENT_TARGETS),
    "compute_unit": RecipeArg("choice", COREML_COMPUTE_UNITS),
    "skip_ops_for_coreml_delegation": RecipeArg("texts"),
    "lower_full_graph": _BOOL,
    "take_over_constant_data": _BOOL,
}
# QNNRecipeProvider._get_expected_keys; the two sets are given as Python sets.
_QNN_ARGS: dict[str, RecipeArg] = {
    "soc_model": RecipeArg("text", required=True),
    "skip_node_id_set": RecipeArg("texts"),
    "skip_node_op_set": RecipeArg("texts"),
    "skip_mutable_buffer": _BOOL,
}
# ArmRecipeProvider's _ETHOS_U_KWARGS.
_ETHOS_U_ARGS: dict[str, RecipeArg] = {
    "macs": _INT,
    "system_config": RecipeArg("text"),
    "memory_mode": RecipeArg("text"),
    "extra_flags": RecipeArg("texts"),
    "config_ini": RecipeArg("text"),
}

# Arguments given as a Python set, not the list TOML writes.
SET_ARGS = ("skip_node_id_set", "skip_node_op_set")
# Arguments given as a coremltools enum member, by the name TOML writes.
COREML_ENUM_ARGS = {"compute_unit": "ComputeUnit", "minimum_deployment_target": "target"}


def coreml_member(name: str, value: object) -> tuple[str, str]:
    """(the coremltools enum, its member) an argument of COREML_ENUM_ARGS names: compute_unit
    is written lowercased, as [..backend_options.coreml] writes it."""
    member = str(value).upper() if name == "compute_unit" else str(value)
    return COREML_ENUM_ARGS[name], member


def _backend(
    backend: str,
    module: str,
    enum: str,
    recipes: dict[str, tuple[dict[str, RecipeArg], bool]],
) -> list[KnownRecipe]:
    return [
        KnownRecipe(name, backend, module, enum, args, calibrates)
        for name, (args, calibrates) in recipes.items()
    ]


def _coreml(extra: dict[str, RecipeArg] | None = None) -> dict[str, RecipeArg]:
    return {**_COREML_ARGS, **(extra or {})}


_PER_GROUP = {"group_size": _INT}
_NONE: dict[str, RecipeArg] = {}

_KNOWN: list[KnownRecipe] = [
    *_backend(
        "xnnpack",
        "executorch.backends.xnnpack.recipes",
        "XNNPackRecipeType",
        {
            "xnnpack_fp32": (_NONE, False),
            "xnnpack_pt2e_int8_dynamic_per_channel": (_NONE, True),
            "xnnpack_pt2e_int8_static_per_channel": (_NONE, True),
            "xnnpack_pt2e_int8_static_per_tensor": (_NONE, True),
            "xnnpack_torchao_int8da_int4w_per_channel": (_NONE, False),
            # per group, despite its name (PerGroup(group_size), 32 by default)
            "xnnpack_torchao_int8da_int4w_per_tensor": (_PER_GROUP, False),
        },
    ),
    *_backend(
        "coreml",
        "executorch.backends.apple.coreml.recipes",
        "CoreMLRecipeType",
        {
            "coreml_fp32": (_coreml(), False),
            "coreml_fp16": (_coreml(), False),
            "coreml_pt2e_int8_static": (_coreml(), True),
            "coreml_pt2e_int8_weight_only": (_coreml(), True),
            "coreml_torchao_int4_weight_only_per_channel": (_coreml(), False),
            "coreml_torchao_int4_weight_only_per_group": (_coreml(_PER_GROUP), False),
            "coreml_torchao_int8_weight_only_per_channel": (_coreml(), False),
            "coreml_torchao_int8_weight_only_per_group": (_coreml(_PER_GROUP), False),
            "coreml_codebook_weight_only": (
                _coreml(
                    {
                        "bits": RecipeArg("int", required=True),
                        "block_size": RecipeArg("ints", required=True),
                    }
                ),
                False,
            ),
        },
    ),
    *_backend(
        "coreai",
        "executorch.backends.apple.coreai.recipes",
        "CoreAIRecipeType",
        {"coreai_fp32": (_NONE, False), "coreai_fp16": (_NONE, False)},
    ),
    *_backend(
        "qnn",
        "executorch.backends.qualcomm.recipes",
        "QNNRecipeType",
        {"qnn_fp16": (_QNN_ARGS, False)},
    ),
    *_backend(
        "arm",
        "executorch.backends.arm.recipes",
        "ArmRecipeType",
        {
            "arm_ethos_u55_int8": (_ETHOS_U_ARGS, True),
            "arm_ethos_u65_int8": (_ETHOS_U_ARGS, True),
            "arm_ethos_u85_int8": (_ETHOS_U_ARGS, True),
            "arm_tosa_fp": (_NONE, False),
            "arm_tosa_int8": (_NONE, True),
            "arm_tosa_a16w8": (_NONE, True),
            "arm_vgf_fp": (_NONE, False),
            "arm_vgf_int8": (_NONE, True),
        },
    ),
    # target recipes: get_ios_recipe combines CoreML's with XNNPACK's FP32 (int8: CoreML's alone)
    *(
        KnownRecipe(name, "ios", "executorch.export.target_recipes", "", _coreml(), int8, fn)
        for name, int8, fn in (
            ("ios-arm64-coreml-fp32", False, "get_ios_recipe"),
            ("ios-arm64-coreml-fp16", False, "get_ios_recipe"),
            ("ios-arm64-coreml-int8", True, "get_ios_recipe"),
        )
    ),
    # get_android_recipe combines QNN's FP16 with XNNPACK's FP32; soc_model defaults to SM8650
    KnownRecipe(
        "android-arm64-snapdragon-fp16",
        "android",
        "executorch.export.target_recipes",
        "",
        {**_QNN_ARGS, "soc_model": RecipeArg("text")},
        False,
        "get_android_recipe",
    ),
]

RECIPES: dict[str, KnownRecipe] = {recipe.name: recipe for recipe in _KNOWN}
