"""[tool.lowerd.targets.T.quantize] with torchao's schemes (issue 22 §4): `quantize_` with
Int8DynamicActivationIntxWeightConfig and `unwrap_tensor_subclass` on the eager modules, as
optimum-executorch's --qlinear and ExecuTorch's xnnpack_torchao recipes quantize. Checked at its
lines, keyed in the inputs digest, shown in the result's options, and equal by sha256 to the
stock calls each variant stands for."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowerd.lowering.build import build_target
from lowerd.project.build_state import target_inputs_digest
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.quantize_options import TorchaoLinears
from lowerd.project.result import TargetResult
from lowerd.project.wire import encode

from helpers import assert_config_error, line_marks, write_pyproject
from known_stock import files_digest, known_or_live
from stock import (
    PROJECTS,
    call_entry,
    forget_project_modules,
    importable_copy,
    optimum_quantize_model,
    sha256,
)
from testkit.stock_lowering import lower_stock

HEAD = """\
[tool.lowerd]
backends = ["xnnpack"]

[tool.lowerd.targets.net]
entry = "models/net.py:make"
"""


def linears_of(tmp_path: Path, table: str) -> TorchaoLinears | None:
    config = load_config(write_pyproject(tmp_path, HEAD + table))
    quantize = config.targets["net"].quantize
    assert quantize is not None
    return quantize.torchao


# Config ---------------------------------------------------------------------------------------


def test_the_torchao_schemes_are_read_with_their_defaults(tmp_path: Path) -> None:
    assert linears_of(tmp_path, 'quantize = { scheme = "8da4w" }\n') == TorchaoLinears(
        4, "per_group", 32, "affine", "linear"
    )
    assert linears_of(tmp_path, 'quantize = { scheme = "8da8w" }\n') == TorchaoLinears(
        8, "per_channel", None, "affine", "linear"
    )
    optimum = (
        '[tool.lowerd.targets.net.quantize]\nscheme = "8da4w"\ngroup_size = 64\n'
        'qparams_algorithm = "hqq_scale_only"\nfilter = "linear_divisible"\n'
    )
    assert linears_of(tmp_path, optimum) == TorchaoLinears(
        4, "per_group", 64, "hqq_scale_only", "linear_divisible"
    )
    # optimum's 8da8w: per channel, filtered by its group size.
    divisible = 'quantize = { scheme = "8da8w", filter = "linear_divisible" }\n'
    assert linears_of(tmp_path, divisible) == TorchaoLinears(
        8, "per_channel", 32, "affine", "linear_divisible"
    )
    assert linears_of(tmp_path, 'quantize = { scheme = "xnnpack-int8" }\n') is None


TABLE = "[tool.lowerd.targets.net.quantize]\n"


@pytest.mark.parametrize(
    ("text", "line", "parts"),
    [
        (TABLE + 'scheme = "8da4"\n', 7, ["'8da4'", "did you mean '8da4w'", "8da4w, 8da8w"]),
        (
            TABLE + 'scheme = "8da4w"\ngranularity = "per_tensor"\n',
            8,
            ["PerGroup or PerAxis(0)", "xnnpack_torchao_int8da_int4w_per_tensor", "per_group"],
        ),
        (
            TABLE + 'scheme = "8da4w"\ngranularity = "per_grup"\n',
            8,
            ["'per_grup'", "did you mean 'per_group'", "per_group, per_channel"],
        ),
        (TABLE + 'scheme = "8da4w"\ngroup_size = 0\n', 8, ["positive integer", "integer 0"]),
        (TABLE + 'scheme = "8da4w"\ngroup_size = "32"\n', 8, ["positive integer"]),
        (
            TABLE + 'scheme = "8da8w"\ngroup_size = 32\n',
            8,
            ["group_size is per_group's", 'filter = "linear"'],
        ),
        (
            TABLE + 'scheme = "8da4w"\nqparams_algorithm = "hqq_scale"\n',
            8,
            ["'hqq_scale'", "did you mean 'hqq_scale_only'", "affine, hqq_scale_only"],
        ),
        (TABLE + 'scheme = "8da4w"\nfilter = ["linear"]\n', 8, ["filter must be a string"]),
        (TABLE + 'scheme = "8da4w"\nfilter = "linears"\n', 8, ["did you mean 'linear'"]),
        (
            TABLE + 'scheme = "8da4w"\ncalibration = "models/data.py:samples"\n',
            8,
            ["calibration is for the PT2E schemes", "8da4w"],
        ),
        (
            TABLE + 'scheme = "xnnpack-int8"\ngroup_size = 32\n',
            8,
            ["group_size is a key of the torchao schemes", "xnnpack-int8 is ExecuTorch's PT2E"],
        ),
        (TABLE + 'scheme = "8da4w"\ngroupsize = 32\n', 8, ["did you mean 'group_size'"]),
    ],
)
def test_torchao_mistakes_are_blamed_on_their_lines(
    tmp_path: Path, text: str, line: int, parts: list[str]
) -> None:
    assert_config_error(tmp_path, HEAD + text, line, parts)


def test_each_torchao_key_is_in_the_inputs_digest(tmp_path: Path) -> None:
    digests = set()
    for table in (
        'quantize = { scheme = "8da4w" }\n',
        'quantize = { scheme = "8da8w" }\n',
        'quantize = { scheme = "8da4w", granularity = "per_channel" }\n',
        'quantize = { scheme = "8da4w", group_size = 64 }\n',
        'quantize = { scheme = "8da4w", qparams_algorithm = "hqq_scale_only" }\n',
        'quantize = { scheme = "8da4w", filter = "linear_divisible" }\n',
    ):
        config = load_config(write_pyproject(tmp_path, HEAD + table))
        digests.add(target_inputs_digest(config, config.targets["net"]))
    assert len(digests) == 6
    # Defaults written out are the defaults: the same bytes, the same digest.
    for table in (
        'quantize = { scheme = "8da4w", group_size = 32, filter = "linear" }\n',
        'quantize = { scheme = "8da4w", granularity = "per_group", qparams_algorithm = "affine"}\n',
    ):
        config = load_config(write_pyproject(tmp_path, HEAD + table))
        digests.add(target_inputs_digest(config, config.targets["net"]))
    assert len(digests) == 6


# Builds: equal to the stock calls --------------------------------------------------------------


def torchao_defaults(model: Any, bits: int, per_group: bool) -> None:
    """ExecuTorch 1.5's SOURCE_TRANSFORM stage with the xnnpack_torchao_int8da_int4w_per_tensor
    (PerGroup(32)) or _per_channel (PerAxis(0)) recipe's config: torchao's defaults besides."""
    import torch
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.utils import unwrap_tensor_subclass

    granularity = PerGroup(group_size=32) if per_group else PerAxis(axis=0)
    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=getattr(torch, f"int{bits}"), weight_granularity=granularity
    )
    quantize_(model, config, None)
    unwrap_tensor_subclass(model)


def shared_twice(methods: dict[str, Any]) -> None:
    """Two modules sharing a linear, as a user quantizes them: the second skips what the first
    quantized (quantize_ cannot quantize a quantized weight again)."""
    import torch
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.utils import TorchAOBaseTensor, unwrap_tensor_subclass

    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4)
    for module, _args in methods.values():
        quantize_(
            module,
            config,
            lambda m, fqn: (
                isinstance(m, torch.nn.Linear) and not isinstance(m.weight, TorchAOBaseTensor)
            ),
        )
        unwrap_tensor_subclass(module)


# target -> (entry, what the stock script does to what the entry returned)
STOCK: dict[str, tuple[str, Callable[[Any], None]]] = {
    "optimum": ("make", lambda made: optimum_quantize_model(made[0], "8da4w")),
    "optimum_int8": ("make", lambda made: optimum_quantize_model(made[0], "8da8w")),
    "recipe_per_group": ("make_aligned", lambda made: torchao_defaults(made[0], 4, True)),
    "recipe_per_channel": ("make_aligned", lambda made: torchao_defaults(made[0], 4, False)),
    "int8": ("make", lambda made: torchao_defaults(made[0], 8, False)),
    "shared": ("make_two", shared_twice),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectConfig]:
    folder = tmp_path_factory.mktemp("torchao") / "torchaoquant"
    with importable_copy(PROJECTS / "torchaoquant", folder) as root:
        yield load_config(root / "pyproject.toml")


def lowerd_build(config: ProjectConfig, name: str, stages: list[Any] | None = None) -> TargetResult:
    forget_project_modules(config.root)
    seen = stages if stages is not None else []
    return build_target(config, config.targets[name], None, lambda s, _t, d: seen.append((s, d)))


def stock_sha256(root: Path, name: str) -> str:
    """The stock calls' digest for the target: tests/stock_digests.json's for these versions, this
    file and the project's (tests/known_stock.py), lowered live otherwise."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    entry, quantize = STOCK[name]

    def live() -> str:
        made = call_entry(root, f"models/linears.py:{entry}")
        quantize(made)
        return sha256(lower_stock(made, [XnnpackPartitioner()])[1])

    return known_or_live(f"torchao-{name}", files_digest(Path(__file__), root), live)


@pytest.mark.parametrize("name", list(STOCK))
def test_each_scheme_equals_its_stock_calls(project: ProjectConfig, name: str) -> None:
    stages: list[tuple[str, str | None]] = []
    result = lowerd_build(project, name, stages)
    assert result.ok, result.error
    assert result.sha256 == stock_sha256(project.root, name)
    method = next(iter(result.methods))
    assert stages.index(("quantize", method)) < stages.index(("export", method))
    # The quantized linears land on XNNPACK: the tiny models are delegated whole.
    assert result.coverage.percent == 100 and result.coverage.backends == ("XNNPACK",)
    shown = encode(result)["options"]["quantize"]
    assert shown == project.targets[name].quantize.to_json()
    assert result.quantize == shown["scheme"]


def test_the_filter_decides_which_linears_quantize(project: ProjectConfig) -> None:
    """Per group of 32, every linear (torchao's default filter) fails at fc3, whose 20 inputs
    make no group: blamed on the quantize table, naming the layer and the filter that skips it."""
    result = lowerd_build(project, "every_linear")
    assert result.error is not None and result.error.kind == "lowering-error"
    file, line = line_marks(project.root)["every_linear.quantize"]
    assert (result.error.file, result.error.line) == (file, line)
    message = result.error.message
    assert "fc3 (Linear, in_features 20)" in message, message
    assert 'filter = "linear_divisible"' in message
    # optimum's filter leaves fc3 in float, and the report's module coverage says so: a
    # quantized linear is torchao's ParametrizedLinear of five ops (the activation's
    # choose_qparams, quantize, dequantize; the weight's dequantize; the linear), all on XNNPACK.
    optimum = lowerd_build(project, "optimum")
    modules = {m.path: m for m in optimum.methods["forward"].modules}
    for path in ("fc1", "fc2"):
        assert (modules[path].module_class, modules[path].ops) == ("ParametrizedLinear", 5)
    assert (modules["fc3"].module_class, modules["fc3"].ops) == ("Linear", 1)
    assert all(m.ops_delegated == m.ops for m in modules.values())
    assert lowerd_build(project, "optimum_int8").sha256 != lowerd_build(project, "int8").sha256
