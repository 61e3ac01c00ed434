"""[tool.lowerd] edge_compile_config, executorch_backend_config, transform_passes and
constant_methods: the names are ExecuTorch's (drift checked), errors are at their lines, the .pte
is the stock script's with the same arguments, and changing one rebuilds."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project import compile_configs
from lowerd.project.build_state import load_state, why_out_of_date
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.located import Located
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import assert_config_error, write_pyproject
from stock import PROJECTS, call_entry, forget_project_modules, importable_copy, sha256

# Drift: the fields taken are the dataclasses' plain ones ---------------------------------------


def _kinds(annotation: Any) -> set[str]:
    """The plain kinds a field's annotation admits: bool, int (Optional[int] too)."""
    options = typing.get_args(annotation) if typing.get_origin(annotation) else (annotation,)
    return {k for k, t in (("bool", bool), ("int", int)) if t in options}


@pytest.mark.parametrize(
    ("class_name", "taken", "not_taken"),
    [
        (
            "EdgeCompileConfig",
            compile_configs.EDGE_COMPILE_CONFIG,
            compile_configs.EDGE_COMPILE_CONFIG_NOT_TAKEN,
        ),
        (
            "ExecutorchBackendConfig",
            compile_configs.EXECUTORCH_BACKEND_CONFIG,
            compile_configs.EXECUTORCH_BACKEND_CONFIG_NOT_TAKEN,
        ),
    ],
)
def test_fields_are_the_dataclasses(
    class_name: str, taken: dict[str, Any], not_taken: tuple[str, ...]
) -> None:
    from executorch.exir.capture import _config

    fields = {f.name: f.type for f in dataclasses.fields(getattr(_config, class_name))}
    assert set(taken) | set(not_taken) == set(fields)
    assert not set(taken) & set(not_taken)
    for name, kind in taken.items():
        assert kind.kind in _kinds(fields[name]), name
    for name in not_taken:
        assert not _kinds(fields[name]), f"{name} is plain: take it"


# Config ---------------------------------------------------------------------------------------


def test_project_defaults_laid_over_key_by_key(tmp_path: Path) -> None:
    config = load_config(
        write_pyproject(
            tmp_path,
            """\
            [tool.lowerd.edge_compile_config]
            _check_ir_validity = false
            [tool.lowerd.executorch_backend_config]
            extract_delegate_segments = false
            segment_alignment = 64
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            external_constants = true
            transform_passes = "passes.py:passes"
            constant_methods = { vocab = 32, names = ["a", "b"] }
            [tool.lowerd.targets.a.executorch_backend_config]
            segment_alignment = 256
            [tool.lowerd.targets.b]
            entry = "a.py:make"
            edge_compile_config._skip_dim_order = true
            """,
        )
    )
    a, b = config.targets["a"], config.targets["b"]
    assert a.executorch_backend_config == {
        "extract_delegate_segments": False,
        "segment_alignment": 256,
        "external_constants": True,
    }
    assert a.external_constants and not b.external_constants
    assert a.edge_compile_config == {"_check_ir_validity": False}
    assert b.edge_compile_config == {"_check_ir_validity": False, "_skip_dim_order": True}
    assert a.transform_passes == Located("passes.py:passes", 9)
    assert a.constant_methods == {"vocab": 32, "names": ["a", "b"]}
    assert b.lowering_options() == {
        "edge_compile_config": b.edge_compile_config,
        "executorch_backend_config": {"extract_delegate_segments": False, "segment_alignment": 64},
    }


@pytest.mark.parametrize(
    ("text", "line", "parts"),
    [
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            [tool.lowerd.targets.a.executorch_backend_config]
            extract_delegate_segment = false
            """,
            4,
            [
                "unknown executorch_backend_config field 'extract_delegate_segment' (did you mean "
                "'extract_delegate_segments'?)",
                "valid options: emit_stacktrace, extract_delegate_segments",
            ],
        ),
        (
            """\
            [tool.lowerd.edge_compile_config]
            _check_ir_validity = "no"
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            """,
            2,
            ["_check_ir_validity must be true or false, got the string"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            edge_compile_config.preserve_ops = ["aten.linear"]
            """,
            3,
            ["unknown edge_compile_config field 'preserve_ops'", "_skip_dim_order"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            executorch_backend_config.segment_alignment = 0
            """,
            3,
            ["segment_alignment must be a positive integer"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            executorch_backend_config = 3
            """,
            3,
            ["executorch_backend_config must be a table of fields"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            transform_passes = "passes:"
            """,
            3,
            ["transform_passes 'passes:' must name a function"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"

            constant_methods = { vocab = { size = 3 } }
            """,
            4,
            ["constant method vocab must be a boolean, integer, float or string"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            executorch_backend_config.external_constants = true
            external_constants = true
            """,
            4,
            ["external_constants is given twice"],
        ),
    ],
    ids=[
        "unknown-field",
        "wrong-type",
        "not-plain",
        "not-positive",
        "not-a-table",
        "bad-passes",
        "bad-constant",
        "shorthand-twice",
    ],
)
def test_config_errors_at_their_line(
    tmp_path: Path, text: str, line: int, parts: list[str]
) -> None:
    assert_config_error(tmp_path, text, line, parts)


# Lowering -------------------------------------------------------------------------------------

PASSES = '''\
"""A trivial user pass: it walks the graph and changes nothing."""

from executorch.exir.pass_base import ExportPass


class Nothing(ExportPass):
    pass


def passes():
    return [Nothing()]
'''

CONFIGURED = """\
edge_compile_config._skip_dim_order = true
executorch_backend_config.extract_delegate_segments = false
transform_passes = "passes.py:passes"
constant_methods = { vocab_size = 32, label = "tiny" }
"""


@pytest.fixture
def refused(tmp_path: Path) -> Iterator[Path]:
    """The basic project, target `refused` (delegated and CPU ops) given every option."""
    with importable_copy(PROJECTS / "basic", tmp_path / "basic") as root:
        (root / "passes.py").write_text(PASSES)
        pyproject = root / "pyproject.toml"
        header = "[tool.lowerd.targets.refused]\n"
        pyproject.write_text(pyproject.read_text().replace(header, header + CONFIGURED))
        yield root


def _build(config: ProjectConfig, store: BlobStore) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets["refused"], store)
    assert result.status == "ok", result.error
    return result


def _stock(root: Path) -> str:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import (
        EdgeCompileConfig,
        ExecutorchBackendConfig,
        to_edge_transform_and_lower,
    )
    from executorch.exir.pass_base import ExportPass

    class Nothing(ExportPass):
        pass

    module, args = call_entry(root, "models/refused.py:make")
    edge = to_edge_transform_and_lower(
        {"forward": torch.export.export(module, args)},
        transform_passes=[Nothing()],
        partitioner=[XnnpackPartitioner()],
        constant_methods={"vocab_size": 32, "label": "tiny"},
        compile_config=EdgeCompileConfig(_skip_dim_order=True),
    )
    program = edge.to_executorch(ExecutorchBackendConfig(extract_delegate_segments=False))
    return sha256(bytes(program.buffer))


def test_configs_equal_stock_and_a_change_rebuilds(refused: Path, tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "cache")
    config = load_config(refused / "pyproject.toml")
    target = config.targets["refused"]
    result = _build(config, store)
    assert result.sha256 == sha256(Path(result.output or "").read_bytes()) == _stock(refused)
    options = {
        "edge_compile_config": {"_skip_dim_order": True},
        "executorch_backend_config": {"extract_delegate_segments": False},
        "transform_passes": "passes.py:passes",
        "constant_methods": {"vocab_size": 32, "label": "tiny"},
    }
    assert result.options == options
    assert decode(TargetResult, encode(result)).options == options
    state = load_state(config, target)
    assert state is not None and state.report.options == options
    # The passes' file is an input read by the build.
    assert str((refused / "passes.py").resolve()) in {s.path for s in state.sources}
    assert why_out_of_date(config, target, state) is None

    # Editing the passes' file makes the target stale, and the build lowers afresh.
    passes = refused / "passes.py"
    passes.write_text(passes.read_text() + "\n# edited\n")
    assert (
        why_out_of_date(config, target, load_state(config, target)) == f"{passes.resolve()} changed"
    )
    again = _build(config, store)
    assert again.reused is None and again.sha256 == result.sha256

    # Toggling a field rebuilds: back to the default segments, the bytes change.
    pyproject = refused / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            "extract_delegate_segments = false", "extract_delegate_segments = true"
        )
    )
    config = load_config(pyproject)
    target = config.targets["refused"]
    reason = why_out_of_date(config, target, load_state(config, target))
    assert reason == "configuration or tool versions changed"
    toggled = _build(config, store)
    assert toggled.reused is None and toggled.sha256 != result.sha256
    assert why_out_of_date(config, target, load_state(config, target)) is None


def test_a_failing_transform_passes_is_blamed_at_its_line(refused: Path, tmp_path: Path) -> None:
    pyproject = refused / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("passes.py:passes", "passes.py:missing"))
    config = load_config(pyproject)
    forget_project_modules(refused)
    result = build_target(config, config.targets["refused"], BlobStore(tmp_path / "cache"))
    assert result.status == "error" and result.error is not None
    assert "has no function 'missing'" in result.error.message
    line = next(
        i
        for i, text in enumerate(pyproject.read_text().splitlines(), 1)
        if text.startswith("transform_passes")
    )
    assert (result.error.file, result.error.line) == ("pyproject.toml", line)
