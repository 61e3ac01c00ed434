"""[tool.lowerd] backend_options: checked at their lines, passed to the partitioners as a stock
script would, part of what decides a rebuild, and shown in the JSON result."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project import backends
from lowerd.project.build_state import load_state, why_out_of_date
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import assert_config_error, write_pyproject
from known_stock import files_digest, known_or_live
from stock import (
    PROJECTS,
    call_entry,
    forget_project_modules,
    importable_copy,
    known_stock_digest,
    sha256,
)

# Drift: the names the config takes are ExecuTorch's (and coremltools') own -------------------


def test_xnnpack_precision_names_are_config_precision_types() -> None:
    from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType

    assert backends.XNNPACK_PRECISIONS == tuple(m.name.lower() for m in ConfigPrecisionType)


def test_vulkan_enum_names_are_the_schemas() -> None:
    from executorch.backends.vulkan.serialization.vulkan_graph_schema import (
        VkMemoryLayout,
        VkStorageType,
    )

    assert backends.VULKAN_STORAGE_TYPES == tuple(VkStorageType.__members__)
    assert backends.VULKAN_MEMORY_LAYOUTS == tuple(VkMemoryLayout.__members__)


def test_coreml_names_are_coremltools() -> None:
    ct = pytest.importorskip("coremltools")
    from executorch.backends.apple.coreml.compiler import CoreMLBackend

    assert backends.COREML_COMPUTE_UNITS == tuple(m.name.lower() for m in ct.ComputeUnit)
    assert backends.COREML_DEPLOYMENT_TARGETS == tuple(m.name for m in ct.target)
    assert backends.COREML_MODEL_TYPES == tuple(m.value for m in CoreMLBackend.MODEL_TYPE)


# Config ---------------------------------------------------------------------------------------


def test_target_options_override_the_projects_option_by_option(tmp_path: Path) -> None:
    config = load_config(
        write_pyproject(
            tmp_path,
            """\
            [tool.lowerd]
            backends = ["xnnpack", "vulkan"]

            [tool.lowerd.backend_options.xnnpack]
            per_op_mode = true
            config_precisions = ["fp32"]

            [tool.lowerd.backend_options.vulkan]
            compile_options = { force_fp16 = true, texture_limits = [2048, 2048, 2048] }

            [tool.lowerd.targets.a]
            entry = "a.py:make"

            [tool.lowerd.targets.b]
            entry = "b.py:make"
            backends = ["xnnpack"]
            backend_options.xnnpack.per_op_mode = false

            [tool.lowerd.targets.c]
            entry = "c.py:make"
            backends = ["coreml"]
            [tool.lowerd.targets.c.backend_options.coreml]
            compute_unit = "cpu_only"
            minimum_deployment_target = "iOS16"
            model_type = "compiled_model"
            """,
        )
    )
    a, b, c = (config.targets[n] for n in "abc")
    assert a.used_backend_options() == {
        "xnnpack": {"per_op_mode": True, "config_precisions": ["fp32"]},
        "vulkan": {"compile_options": {"force_fp16": True, "texture_limits": [2048, 2048, 2048]}},
    }
    # b lowers with XNNPACK only: Vulkan's options are not among what decides its bytes.
    assert b.used_backend_options() == {
        "xnnpack": {"per_op_mode": False, "config_precisions": ["fp32"]}
    }
    assert c.used_backend_options() == {
        "coreml": {
            "compute_unit": "cpu_only",
            "minimum_deployment_target": "iOS16",
            "model_type": "compiled_model",
        }
    }


def test_no_options_by_default(tmp_path: Path) -> None:
    config = load_config(
        write_pyproject(tmp_path, '[tool.lowerd.targets.a]\nentry = "a.py:make"\n')
    )
    assert config.targets["a"].used_backend_options() == {}


@pytest.mark.parametrize(
    ("text", "line", "parts"),
    [
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            [tool.lowerd.targets.a.backend_options.xnnpack]
            per_op_mode = true
            per_op = true
            """,
            5,
            [
                "unknown XNNPACK option 'per_op' (did you mean 'per_op_mode'?)",
                "valid options: config_precisions, per_op_mode",
            ],
        ),
        (
            """\
            [tool.lowerd.backend_options.xnnpack]
            config_precisions = [
                "fp32",
                "FP32",
            ]
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            """,
            4,
            [
                "unknown config_precisions value 'FP32' (did you mean 'fp32'?)",
                "valid values: fp32, static_quant, dynamic_quant",
            ],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"

            [tool.lowerd.targets.a.backend_options.xnnpack]
            per_op_mode = "yes"
            """,
            5,
            ['per_op_mode must be true or false, got the string "yes"'],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            backend_options.xnnpack.config_precisions = "fp32"
            """,
            3,
            ["config_precisions must be a non-empty list of names from fp32, static_quant"],
        ),
        (
            """\
            [tool.lowerd.backend_options.xnnpak]
            per_op_mode = true
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            """,
            1,
            [
                "unknown backend 'xnnpak' in backend_options (did you mean 'xnnpack'?)",
                "known backends: xnnpack, vulkan, coreml",
            ],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            [tool.lowerd.targets.a.backend_options.vulkan.compile_options]
            force_fp16 = true
            force_fp61 = true
            """,
            5,
            ["unknown compile_options key 'force_fp61' (did you mean 'force_fp16'?)"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            [tool.lowerd.targets.a.backend_options.vulkan.compile_options]
            texture_limits = [1, 2]
            """,
            4,
            ["texture_limits must be an array of three positive integers, got an array"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            [tool.lowerd.targets.a.backend_options.coreml]
            compute_unit = "CPU"
            """,
            4,
            [
                "unknown compute_unit value 'CPU'",
                "valid values: all, cpu_and_gpu, cpu_only, cpu_and_ne",
            ],
        ),
        (
            """\
            [tool.lowerd]
            backend_options = 3
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            """,
            2,
            ["backend_options must be a table of backends", "got the integer 3"],
        ),
    ],
    ids=[
        "unknown-option",
        "bad-precision",
        "wrong-type",
        "precisions-not-a-list",
        "unknown-backend",
        "unknown-vulkan-key",
        "bad-texture-limits",
        "bad-compute-unit",
        "not-a-table",
    ],
)
def test_option_errors_at_their_line(
    tmp_path: Path, text: str, line: int, parts: list[str]
) -> None:
    assert_config_error(tmp_path, text, line, parts)


# Lowering -------------------------------------------------------------------------------------


def _with_options(project: Path, name: str, table: str) -> ProjectConfig:
    """The basic project with `table` (TOML lines) added to target `name`."""
    pyproject = project / "pyproject.toml"
    header = f"[tool.lowerd.targets.{name}]\n"
    text = pyproject.read_text()
    assert header in text
    pyproject.write_text(text.replace(header, header + textwrap.dedent(table)))
    return load_config(pyproject)


def _build(config: ProjectConfig, name: str, store: BlobStore, reuse: bool = True) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets[name], store, reuse=reuse)
    assert result.status == "ok", result.error
    return result


def _stock_with(name: str, root: Path, entry: str, partitioners: Callable[[], list[Any]]) -> str:
    """The .pte's sha256 from the plain ExecuTorch script with these partitioners: the table's
    under `name` (tests/known_stock.py) for this file (the script and the partitioners' arguments)
    and the project's files, or lowered live."""

    def live() -> str:
        import torch
        from executorch.exir import to_edge_transform_and_lower

        module, args = call_entry(root, entry)
        program = torch.export.export(module, args)
        lowered = to_edge_transform_and_lower({"forward": program}, partitioner=partitioners())
        return sha256(bytes(lowered.to_executorch().buffer))

    return known_or_live(name, files_digest(Path(__file__), root), live)


@pytest.fixture
def blocks(tmp_path: Path) -> Iterator[Path]:
    """A private copy of tests/projects/blocks: Linear, GELU, cumsum, Linear, add, four times."""
    with importable_copy(PROJECTS / "blocks", tmp_path / "blocks") as root:
        yield root


def test_xnnpack_options_equal_stock_and_never_reuse_a_wrong_blob(
    blocks: Path, tmp_path: Path
) -> None:
    from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    store = BlobStore(tmp_path / "cache")
    plain = _build(load_config(blocks / "pyproject.toml"), "stack", store, reuse=False)
    assert plain.backend_options == {}

    config = _with_options(
        blocks,
        "stack",
        """\
        backend_options.xnnpack.per_op_mode = true
        backend_options.xnnpack.config_precisions = ["fp32"]
        """,
    )
    expected = _stock_with(
        "blocks-xnnpack-per-op-fp32",
        blocks,
        "models/stack.py:make",
        lambda: [
            XnnpackPartitioner(config_precisions=[ConfigPrecisionType.FP32], per_op_mode=True)
        ],
    )
    result = _build(config, "stack", store)
    assert result.reused is None  # the options changed: lowered again, with the same cache
    assert result.sha256 == sha256(Path(result.output or "").read_bytes()) == expected
    assert result.sha256 != plain.sha256  # per-op partitions: other delegated graphs
    options = {"xnnpack": {"per_op_mode": True, "config_precisions": ["fp32"]}}
    assert result.backend_options == options
    assert encode(result)["backend_options"] == options
    assert decode(TargetResult, encode(result)).backend_options == options
    # The build record answers with the options too.
    state = load_state(config, config.targets["stack"])
    assert state is not None and state.report.backend_options == options

    # Only static-quant configs: the fp32 ops stay out; what is left to delegate keys afresh.
    pyproject = blocks / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text()
        .replace("backend_options.xnnpack.per_op_mode = true\n", "")
        .replace('["fp32"]', '["static_quant"]')
    )
    config = load_config(pyproject)
    quant = _build(config, "stack", store)
    expected = _stock_with(
        "blocks-xnnpack-static-quant",
        blocks,
        "models/stack.py:make",
        lambda: [XnnpackPartitioner(config_precisions=[ConfigPrecisionType.STATIC_QUANT])],
    )
    assert quant.sha256 == expected not in (plain.sha256, result.sha256)


def test_changing_an_option_rebuilds_and_an_unrelated_edit_keeps(
    project: Path, tmp_path: Path
) -> None:
    store = BlobStore(tmp_path / "cache")
    config = _with_options(project, "tiny_linear", "backend_options.xnnpack.per_op_mode = true\n")
    first = _build(config, "tiny_linear", store)
    assert why_out_of_date(config, config.targets["tiny_linear"], _state(config)) is None

    # Another target's options, and Vulkan options of a target lowered by XNNPACK only, are
    # no input of tiny_linear.
    config = _with_options(
        project,
        "refused",
        "backend_options.xnnpack.per_op_mode = true\n",
    )
    config = _with_options(
        project, "tiny_linear", "backend_options.vulkan.compile_options.force_fp16 = true\n"
    )
    assert why_out_of_date(config, config.targets["tiny_linear"], _state(config)) is None
    kept = _build(config, "tiny_linear", store)
    assert kept.sha256 == first.sha256 and kept.reused == "same-program"

    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            "[tool.lowerd.targets.tiny_linear]\nbackend_options.vulkan.compile_options."
            "force_fp16 = true\nbackend_options.xnnpack.per_op_mode = true\n",
            "[tool.lowerd.targets.tiny_linear]\nbackend_options.xnnpack.per_op_mode = false\n",
        )
    )
    config = load_config(pyproject)
    assert config.targets["tiny_linear"].used_backend_options() == {
        "xnnpack": {"per_op_mode": False}
    }
    reason = why_out_of_date(config, config.targets["tiny_linear"], _state(config))
    assert reason == "configuration or tool versions changed"
    rebuilt = _build(config, "tiny_linear", store)
    assert rebuilt.reused is None
    stock = known_stock_digest(
        "basic-tiny_linear-per-op-false", project, "models/tiny_linear.py:make", ["xnnpack"]
    )
    assert rebuilt.sha256 == stock


def _state(config: ProjectConfig) -> Any:
    return load_state(config, config.targets["tiny_linear"])


def test_vulkan_compile_options_equal_stock(project: Path, tmp_path: Path) -> None:
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

    store = BlobStore(tmp_path / "cache")
    config = _with_options(project, "tiny_linear", 'backends = ["vulkan"]\n')
    plain = _build(config, "tiny_linear", store, reuse=False)
    config = _with_options(
        project, "tiny_linear", "backend_options.vulkan.compile_options.force_fp16 = true\n"
    )
    result = _build(config, "tiny_linear", store)
    expected = _stock_with(
        "basic-tiny_linear-vulkan-fp16",
        project,
        "models/tiny_linear.py:make",
        lambda: [VulkanPartitioner(compile_options={"force_fp16": True})],
    )
    assert result.sha256 == expected != plain.sha256
    # Same delegated graphs, other compile specs: the blobs of the plain build are not reused.
    assert result.cache.hits == 0 and result.cache.misses > 0


def test_coreml_options_become_the_backends_compile_specs() -> None:
    # CoreML output holds a fresh uuid per blob, so no stock comparison of its bytes: the
    # partitioner gets the compile specs generate_compile_specs makes of the same arguments.
    ct = pytest.importorskip("coremltools")
    from executorch.backends.apple.coreml.compiler import CoreMLBackend

    from lowerd.lowering.partitioners import make_partitioner

    options = {
        "compute_unit": "cpu_only",
        "minimum_deployment_target": "iOS16",
        "model_type": "compiled_model",
    }
    partitioner: Any = make_partitioner(backends.BACKENDS["coreml"], options)
    expected = CoreMLBackend.generate_compile_specs(
        compute_unit=ct.ComputeUnit.CPU_ONLY,
        minimum_deployment_target=ct.target.iOS16,
        model_type=CoreMLBackend.MODEL_TYPE.COMPILED_MODEL,
    )
    got = partitioner.delegation_spec.compile_specs
    assert [(s.key, bytes(s.value)) for s in got] == [(s.key, bytes(s.value)) for s in expected]
