"""[tool.lowerd.targets.T] recipe: ExecuTorch's export recipes as a config line. Checked at their
lines against ExecuTorch's registry, and built byte-identical to `executorch.export.export(model,
example_inputs, recipe)`, each stage in the progress and the recipe in the result's options."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project.build_state import target_inputs_digest
from lowerd.project.compare import CompareBatch
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.located import Located
from lowerd.project.recipe_names import RECIPES
from lowerd.project.result import TargetResult
from lowerd.project.wire import encode

from helpers import assert_config_error, write_pyproject
from known_stock import files_digest, known_or_live
from stock import PROJECTS, call_entry, forget_project_modules, importable_copy, sha256

HEAD = """\
[tool.lowerd]
backends = ["xnnpack"]

[tool.lowerd.targets.net]
entry = "models/net.py:make"
"""

# Config ---------------------------------------------------------------------------------------


def test_a_recipe_is_read_as_a_name_or_a_table(tmp_path: Path) -> None:
    forms = {
        'recipe = "xnnpack_fp32"\n': ("xnnpack_fp32", {}, None),
        'recipe = { name = "xnnpack_torchao_int8da_int4w_per_tensor", group_size = 64 }\n': (
            "xnnpack_torchao_int8da_int4w_per_tensor",
            {"group_size": 64},
            None,
        ),
        '[tool.lowerd.targets.net.recipe]\nname = "xnnpack_pt2e_int8_static_per_tensor"\n'
        'calibration = "models/net.py:samples"\n': (
            "xnnpack_pt2e_int8_static_per_tensor",
            {},
            Located("models/net.py:samples", 8),
        ),
        'recipe = { name = "ios-arm64-coreml-fp16", compute_unit = "cpu_only" }\n': (
            "ios-arm64-coreml-fp16",
            {"compute_unit": "cpu_only"},
            None,
        ),
    }
    for text, (name, kwargs, calibration) in forms.items():
        recipe = load_config(write_pyproject(tmp_path, HEAD + text)).targets["net"].recipe
        assert recipe is not None
        assert (recipe.name, recipe.kwargs, recipe.calibration) == (name, kwargs, calibration)


def test_recipe_mistakes_are_blamed_on_their_lines(tmp_path: Path) -> None:
    cases = [
        ('recipe = "xnnpack_fp33"\n', 6, ["'xnnpack_fp33'", "did you mean 'xnnpack_fp32'"]),
        ("recipe = 3\n", 6, ["recipe name or a table", "the integer 3"]),
        ("recipe = { group_size = 3 }\n", 6, ["recipe has no name"]),
        (
            '[tool.lowerd.targets.net.recipe]\nname = "xnnpack_torchao_int8da_int4w_per_tensor"\n'
            "grup_size = 64\n",
            8,
            ["'grup_size'", "did you mean 'group_size'"],
        ),
        (
            '[tool.lowerd.targets.net.recipe]\nname = "xnnpack_torchao_int8da_int4w_per_tensor"\n'
            'group_size = "64"\n',
            8,
            ["group_size must be a positive integer", 'the string "64"'],
        ),
        (
            '[tool.lowerd.targets.net.recipe]\nname = "xnnpack_fp32"\n'
            'calibration = "models/net.py:samples"\n',
            8,
            ["'xnnpack_fp32' has no PT2E quantizer to calibrate"],
        ),
        ('recipe = { name = "qnn_fp16" }\n', 6, ["'qnn_fp16' needs soc_model"]),
        (
            'recipe = { name = "coreml_fp16", compute_unit = "gpu" }\n',
            6,
            ["unknown compute_unit value 'gpu'", "cpu_and_gpu"],
        ),
    ]
    for text, line, parts in cases:
        assert_config_error(tmp_path, HEAD + text, line, parts)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("backends", '["xnnpack"]'),
        ("partitioners", '"models/p.py:make"'),
        ("whole_program", '{ backend_id = "XnnpackBackend" }'),
        ("quantize", '{ scheme = "xnnpack-int8" }'),
        ("transform_passes", '"models/p.py:passes"'),
        ("edge_compile_config", "{ _check_ir_validity = false }"),
        ("executorch_backend_config", "{ extract_delegate_segments = false }"),
        ("external_constants", "true"),
        ("backend_options", "{ xnnpack = { per_op_mode = true } }"),
        ("export", "{ strict = false }"),
        ("memory_planning", "{ alloc_graph_input = false }"),
        ("sym_shape_eval", '"hint"'),
    ],
)
def test_a_recipe_target_sets_no_key_its_recipe_says(tmp_path: Path, key: str, value: str) -> None:
    text = HEAD + 'recipe = "xnnpack_fp32"\n' + f"{key} = {value}\n"
    line = 6 if key in ("backends", "partitioners", "whole_program") else 7  # blamed: recipe
    assert_config_error(tmp_path, text, line, [key, "recipe"])


def test_the_project_defaults_do_not_reach_a_recipe_target(tmp_path: Path) -> None:
    text = HEAD.replace(
        "[tool.lowerd.targets.net]",
        'sym_shape_eval = "hint"\n[tool.lowerd.export]\nstrict = true\n'
        "[tool.lowerd.edge_compile_config]\n_check_ir_validity = false\n"
        "[tool.lowerd.backend_options.xnnpack]\nper_op_mode = true\n\n"
        "[tool.lowerd.targets.net]",
    )
    target = load_config(write_pyproject(tmp_path, text + 'recipe = "xnnpack_fp32"\n')).targets[
        "net"
    ]
    assert target.backends == () and target.backend_options == {}
    assert target.lowering_options() == {"recipe": {"name": "xnnpack_fp32"}}
    assert target.used_backend_options() == {}


def test_the_recipe_is_in_the_inputs_digest(tmp_path: Path) -> None:
    digests = set()
    for text in (
        "",
        'recipe = "xnnpack_fp32"\n',
        'recipe = "xnnpack_torchao_int8da_int4w_per_tensor"\n',
        'recipe = { name = "xnnpack_torchao_int8da_int4w_per_tensor", group_size = 64 }\n',
        'recipe = "xnnpack_pt2e_int8_static_per_tensor"\n',
        'recipe = { name = "xnnpack_pt2e_int8_static_per_tensor", calibration = "m.py:s" }\n',
    ):
        config = load_config(write_pyproject(tmp_path, HEAD + text))
        digests.add(target_inputs_digest(config, config.targets["net"]))
    assert len(digests) == 6


def test_compare_has_no_backend_to_swap_in_a_recipe_target(tmp_path: Path) -> None:
    path = write_pyproject(tmp_path, HEAD + 'recipe = "xnnpack_fp32"\n')
    with pytest.raises(ConfigError) as info:
        CompareBatch.load(path, "net", None)
    assert "lowers with its own recipe" in info.value.message
    config = load_config(path).with_backends(("vulkan",))  # the editor's override passes it by
    assert config.targets["net"].backends == ()


# The names are ExecuTorch's -------------------------------------------------------------------


def _enum_values(module: str, enum: str) -> set[str]:
    import importlib

    return {member.value for member in getattr(importlib.import_module(module), enum)}


def test_the_names_and_arguments_are_executorchs() -> None:
    """Every RecipeType of the backends importable here, by value; Arm's from its source (its
    recipes do not import without tosa_serializer); the arguments each provider expects."""
    from executorch.backends.apple.coreml.recipes import CoreMLRecipeProvider
    from executorch.backends.qualcomm.recipes import QNNRecipeProvider

    by_enum: dict[tuple[str, str], set[str]] = {}
    for recipe in RECIPES.values():
        if recipe.enum:
            by_enum.setdefault((recipe.module, recipe.enum), set()).add(recipe.name)
    for (module, enum), names in by_enum.items():
        if enum == "ArmRecipeType":
            source = Path(_spec_origin("executorch.backends.arm")).parent / "recipes"
            text = (source / "arm_recipe_types.py").read_text()
            assert names == set(re.findall(r'= "(arm_\w+)"', text))
        else:
            assert names == _enum_values(module, enum), enum
    coreml, qnn = CoreMLRecipeProvider(), QNNRecipeProvider()
    for recipe in RECIPES.values():
        if recipe.backend == "coreml":
            expected = coreml._get_expected_keys(_member(recipe.module, recipe.enum, recipe.name))
            assert set(recipe.args) == expected - {"filter_fn"}, recipe.name
        if recipe.backend == "qnn":
            expected = qnn._get_expected_keys(_member(recipe.module, recipe.enum, recipe.name))
            assert set(recipe.args) == expected, recipe.name


def test_a_recipe_calibrates_when_it_has_a_pt2e_quantizer() -> None:
    from executorch.export import ExportRecipe

    required = {"coreml_codebook_weight_only": {"bits": 4, "block_size": [-1, 16]}}
    for recipe in RECIPES.values():
        if recipe.backend not in ("xnnpack", "coreml"):
            continue
        made = ExportRecipe.get_recipe(
            _member(recipe.module, recipe.enum, recipe.name), **required.get(recipe.name, {})
        )
        quantization = made.quantization_recipe
        assert recipe.calibrates == bool(quantization and quantization.quantizers), recipe.name


def _member(module: str, enum: str, value: str) -> Any:
    import importlib

    return getattr(importlib.import_module(module), enum)(value)


def _spec_origin(name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    return spec.origin


# Builds: equal to executorch.export.export -------------------------------------------------------

XNNPACK_TARGETS = {
    "fp32": ("xnnpack_fp32", {}),
    "int8_dynamic": ("xnnpack_pt2e_int8_dynamic_per_channel", {}),
    "int8_static_per_channel": ("xnnpack_pt2e_int8_static_per_channel", {}),
    "int8_static_per_tensor": ("xnnpack_pt2e_int8_static_per_tensor", {}),
    "int4_per_channel": ("xnnpack_torchao_int8da_int4w_per_channel", {}),
    "int4_group32": ("xnnpack_torchao_int8da_int4w_per_tensor", {}),
    "int4_group64": ("xnnpack_torchao_int8da_int4w_per_tensor", {"group_size": 64}),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectConfig]:
    root = tmp_path_factory.mktemp("recipes") / "recipes"
    with importable_copy(PROJECTS / "recipes", root):
        yield load_config(root / "pyproject.toml")


def stock_recipe_pte(root: Path, recipe_type: str, kwargs: dict[str, Any]) -> bytes:
    """What a user's script writes: the entry's model, its example args and the calibration
    samples as example inputs, ExecuTorch's recipe by name."""
    from executorch.backends.xnnpack.recipes import XNNPackRecipeType
    from executorch.export import ExportRecipe, export

    model, args = call_entry(root, "models/net.py:make")
    samples = call_entry(root, "models/net.py:samples") if "pt2e" in recipe_type else []
    recipe = ExportRecipe.get_recipe(XNNPackRecipeType(recipe_type), **kwargs)
    return bytes(export(model, [args, *samples], recipe).get_pte_buffer())


def stock_recipe_sha256(name: str, root: Path) -> str:
    """sha256(stock_recipe_pte(...)) for an XNNPACK_TARGETS target: tests/stock_digests.json's for
    these versions, this file and the project's files (tests/known_stock.py), made live
    otherwise."""
    recipe_type, kwargs = XNNPACK_TARGETS[name]

    def live() -> str:
        return sha256(stock_recipe_pte(root, recipe_type, kwargs))

    return known_or_live(f"recipe-{name}", files_digest(Path(__file__), root), live)


def build(config: ProjectConfig, name: str, store: BlobStore | None, **kw: Any) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets[name], store, **kw)
    assert result.ok, result.error
    return result


@dataclass(frozen=True)
class ColdBuild:
    """A target of the module's project built on an empty cache of its own."""

    result: TargetResult
    stages: list[tuple[str, str | None]]  # the progress: (stage, detail)
    cache: Path  # copy it to build on


@pytest.fixture(scope="module")
def cold(
    project: ProjectConfig, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], ColdBuild]:
    """Each target's first build, made when a test first asks for it: the recipe tests check it
    against executorch.export.export, the rebuild tests build again on a copy of its cache."""
    built: dict[str, ColdBuild] = {}

    def cold_build(name: str) -> ColdBuild:
        if name not in built:
            stages: list[tuple[str, str | None]] = []
            cache = tmp_path_factory.mktemp(f"cold-{name}") / "cache"
            result = build(
                project, name, BlobStore(cache), progress=lambda s, _t, d: stages.append((s, d))
            )
            built[name] = ColdBuild(result, stages, cache)
        return built[name]

    return cold_build


def copied_store(build: ColdBuild, folder: Path) -> BlobStore:
    return BlobStore(shutil.copytree(build.cache, folder / "cache"))


@pytest.mark.parametrize("name", list(XNNPACK_TARGETS))
def test_each_xnnpack_recipe_writes_the_bytes_of_executorch_export(
    project: ProjectConfig, cold: Callable[[str], ColdBuild], name: str
) -> None:
    result, stages = cold(name).result, cold(name).stages
    recipe_type, kwargs = XNNPACK_TARGETS[name]
    assert result.sha256 == stock_recipe_sha256(name, project.root)
    # each of ExportSession's stages, in its order
    before_export = {"fp32": [], "int8": ["quantize"], "int4": ["source_transform"]}
    expected = ["load", *before_export[name[:4]], "export", "partition", "emit", "write"]
    assert [stage for stage, _ in stages if stage != "preprocess"] == expected
    options = encode(result)["options"]
    assert options["recipe"]["name"] == recipe_type and options["recipe"].items() >= kwargs.items()
    assert result.coverage.percent == 100 and result.coverage.backends == ("XNNPACK",)


def test_a_recipe_rebuild_keeps_the_program_and_serves_its_blobs(
    project: ProjectConfig, cold: Callable[[str], ColdBuild], tmp_path: Path
) -> None:
    # The first build, on an empty cache; each build below on a copy of its cache.
    first = cold("int8_static_per_tensor")
    assert first.result.cache.misses > 0 and first.result.cache.hits == 0
    store = copied_store(first, tmp_path)
    kept = build(project, "int8_static_per_tensor", store)
    assert kept.reused == "same-program" and kept.sha256 == first.result.sha256
    lowered = build(project, "int8_static_per_tensor", store, reuse=False)
    assert lowered.reused is None and lowered.sha256 == first.result.sha256
    assert lowered.cache.hits == first.result.cache.misses and lowered.cache.misses == 0
    # convert_pt2e's searches, run by the recipe's QUANTIZE stage, are memoized as the entry's
    assert first.result.memo["qparams"]["misses"] > 0 and lowered.memo["qparams"]["misses"] == 0
    assert lowered.memo["qparams"]["hits"] > 0


def test_a_torchao_recipe_serves_its_weights_from_the_memo(
    project: ProjectConfig, cold: Callable[[str], ColdBuild], tmp_path: Path
) -> None:
    first = cold("int4_group32")
    again = build(project, "int4_group32", copied_store(first, tmp_path), reuse=False)
    assert again.sha256 == first.result.sha256
    assert first.result.memo["intx"]["misses"] > 0 and again.memo["intx"]["misses"] == 0
    assert again.memo["intx"]["hits"] > 0


RECIPE_TARGETS = """
[tool.lowerd.targets.ios]
entry = "models/net.py:make"
recipe = { name = "ios-arm64-coreml-fp16", compute_unit = "cpu_only" }  # LINE-MARK: ios

[tool.lowerd.targets.android]
entry = "models/net.py:make"
recipe = "android-arm64-snapdragon-fp16"  # LINE-MARK: android

[tool.lowerd.targets.arm]
entry = "models/net.py:make"
recipe = "arm_tosa_fp"  # LINE-MARK: arm
"""


@pytest.fixture(scope="module")
def targets(project: ProjectConfig) -> ProjectConfig:
    path = project.path
    path.write_text(path.read_text() + RECIPE_TARGETS)
    return load_config(path)


def _line(config: ProjectConfig, mark: str) -> int:
    lines = config.path.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.endswith(f"LINE-MARK: {mark}"))


def test_an_ios_target_recipe_lowers_to_coreml(targets: ProjectConfig) -> None:
    """get_ios_recipe's CoreML blob is not deterministic (it embeds uuid4s): no bytes to equal."""
    result = build(targets, "ios", None)
    assert result.coverage.percent == 100 and result.coverage.backends == ("CoreML",)
    assert encode(result)["options"]["recipe"] == {
        "name": "ios-arm64-coreml-fp16",
        "compute_unit": "cpu_only",
    }


def test_a_recipe_that_cannot_be_made_here_is_an_error_at_its_line(
    targets: ProjectConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QNN_SDK_ROOT", raising=False)
    cases = [("android", "needs the Qualcomm QNN SDK")]
    if not _importable("executorch.backends.arm.recipes"):  # no tosa_serializer here
        cases.append(("arm", "arm's recipes cannot be loaded"))
    for name, words in cases:
        forget_project_modules(targets.root)
        result = build_target(targets, targets.targets[name], None)
        assert result.error is not None and result.error.kind == "backend-unavailable"
        assert words in result.error.message
        assert result.error.file == "pyproject.toml"
        assert result.error.line == _line(targets, name)


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


KEYWORD_ENTRY = """\
import torch

from lowerd import Method


def make():  # LINE-MARK: keywords
    return Method(torch.nn.Linear(4, 4).eval(), kwargs={"input": torch.randn(1, 4)})
"""


def test_keyword_example_inputs_are_refused_at_the_entry(tmp_path: Path) -> None:
    """executorch.export.export takes each example input as a tuple of positional inputs."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "keywords.py").write_text(KEYWORD_ENTRY)
    path = write_pyproject(
        tmp_path, HEAD.replace("models/net.py", "models/keywords.py") + 'recipe = "xnnpack_fp32"\n'
    )
    config = load_config(path)
    try:
        result = build_target(config, config.targets["net"], None)
    finally:
        forget_project_modules(tmp_path)
    assert result.error is not None and result.error.kind == "entry-error"
    assert "keyword example inputs (input)" in result.error.message
    assert "executorch.export.export takes example inputs by position" in result.error.message
    lines = KEYWORD_ENTRY.splitlines()
    marked = next(i for i, text in enumerate(lines, 1) if text.endswith("LINE-MARK: keywords"))
    assert (result.error.file, result.error.line) == ("models/keywords.py", marked)
