"""[tool.lowerd.targets.T.quantize]: ExecuTorch's documented PT2E flow, declared instead of written
in the entry. Checked at its lines, equal to the documented script's .pte, in the inputs digest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project.build_state import load_state, target_inputs_digest
from lowerd.project.config import load_config
from lowerd.project.errors import ConfigError
from lowerd.project.located import Located
from lowerd.project.wire import encode

from helpers import load_error
from stock import PROJECTS, call_entry, importable_copy, sha256

# Config ---------------------------------------------------------------------------------------

HEAD = """\
[tool.lowerd]
backends = ["xnnpack"]

[tool.lowerd.targets.net]
entry = "models/net.py:make"
"""


def quantize_error(tmp_path: Path, text: str) -> ConfigError:
    """The error of HEAD's project with text after it."""
    return load_error(tmp_path, HEAD + text)


def test_a_declared_scheme_and_calibration_are_read(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(
        HEAD + '[tool.lowerd.targets.net.quantize]\nscheme = "xnnpack-int8"\n'
        'calibration = "models.data:samples"\n'
    )
    quantize = load_config(path).targets["net"].quantize
    assert quantize is not None and quantize.scheme == "xnnpack-int8" and not quantize.is_dynamic
    assert quantize.calibration == Located("models.data:samples", 8)
    path.write_text(HEAD + 'quantize = { scheme = "xnnpack-int8-dynamic" }\n')
    quantize = load_config(path).targets["net"].quantize
    assert quantize is not None and quantize.is_dynamic and quantize.calibration is None


def test_an_unknown_scheme_is_blamed_on_its_line_with_the_valid_ones(tmp_path: Path) -> None:
    error = quantize_error(
        tmp_path, '[tool.lowerd.targets.net.quantize]\nscheme = "xnnpack-int9"\n'
    )
    assert error.location.line == 7
    assert "'xnnpack-int9'" in error.message and "did you mean 'xnnpack-int8'" in error.message
    assert "xnnpack-int8, xnnpack-int8-dynamic" in error.message


def test_quantize_mistakes_are_blamed_on_their_lines(tmp_path: Path) -> None:
    error = quantize_error(
        tmp_path, '[tool.lowerd.targets.net.quantize]\nscheme = "xnnpack-int8"\ncalbration = "x"\n'
    )
    assert error.location.line == 8 and "did you mean 'calibration'" in error.message
    error = quantize_error(tmp_path, "[tool.lowerd.targets.net.quantize]\nscheme = 8\n")
    assert error.location.line == 7 and "the integer 8" in error.message
    error = quantize_error(tmp_path, 'quantize = "xnnpack-int8"\n')
    assert error.location.line == 6 and "must be a table" in error.message
    error = quantize_error(tmp_path, '[tool.lowerd.targets.net.quantize]\ncalibration = "a.py:f"\n')
    assert error.location.line == 6 and "no scheme" in error.message
    error = quantize_error(
        tmp_path,
        '[tool.lowerd.targets.net.quantize]\nscheme = "xnnpack-int8"\n'
        'calibration = "data/x.txt:f"\n',
    )
    assert error.location.line == 8 and "calibration file 'data/x.txt'" in error.message
    error = quantize_error(
        tmp_path,
        '[tool.lowerd.targets.net.quantize]\nscheme = "xnnpack-int8"\ncalibration = "data.py"\n',
    )
    assert error.location.line == 8 and "calibration 'data.py' must name a function" in (
        error.message
    )


def test_the_quantize_table_is_in_the_inputs_digest(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    digests = set()
    for table in (
        "",
        'quantize = { scheme = "xnnpack-int8" }\n',
        'quantize = { scheme = "xnnpack-int8-dynamic" }\n',
        'quantize = { scheme = "xnnpack-int8", calibration = "models/data.py:samples" }\n',
    ):
        path.write_text(HEAD + table)
        config = load_config(path)
        digests.add(target_inputs_digest(config, config.targets["net"]))
    assert len(digests) == 4


# Builds: equal to the documented PT2E script ---------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    with importable_copy(PROJECTS / "declaredquant", tmp_path / "declaredquant") as root:
        yield root


def documented_script(root: Path, calibrated: bool, is_dynamic: bool) -> bytes:
    """ExecuTorch's documented PT2E flow for XNNPACK, as a user script writes it."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model, example = call_entry(root, "models/tiny.py:make")
    samples = call_entry(root, "models/calibrate.py:samples") if calibrated else [example]
    graph = torch.export.export(model, example).module()
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=is_dynamic)
    )
    prepared = prepare_pt2e(graph, quantizer)
    for args in samples:
        prepared(*args)
    program = torch.export.export(convert_pt2e(prepared), example)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return bytes(lowered.to_executorch().buffer)


def test_declared_quantization_equals_the_documented_script(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    store = BlobStore(tmp_path / "cache")
    stages: list[tuple[str, str | None]] = []
    static = build_target(
        config, config.targets["static"], store, lambda s, _t, d: stages.append((s, d))
    )
    assert static.ok, static.error
    assert ("quantize", "forward") in stages
    assert stages.index(("quantize", "forward")) < stages.index(("export", "forward"))
    assert static.quantize == "xnnpack-int8" and encode(static)["quantize"] == "xnnpack-int8"
    assert static.coverage.percent == 100
    assert static.memo["qparams"]["misses"] > 0  # convert_pt2e's searches ran under the memo
    assert static.sha256 == sha256(documented_script(project, calibrated=True, is_dynamic=False))
    # The calibration function's file is an input: editing it rebuilds.
    state = load_state(config, config.targets["static"])
    assert state is not None
    assert str((project / "models/calibrate.py").resolve()) in {s.path for s in state.sources}

    dynamic = build_target(config, config.targets["dynamic"], store)
    assert dynamic.ok, dynamic.error
    assert dynamic.quantize == "xnnpack-int8-dynamic"
    assert dynamic.sha256 == sha256(documented_script(project, calibrated=False, is_dynamic=True))
    assert dynamic.sha256 != static.sha256


def test_a_calibration_that_returns_no_tuples_is_blamed_on_its_function(project: Path) -> None:
    (project / "models/calibrate.py").write_text("def samples():\n    return [1, 2]\n")
    config = load_config(project / "pyproject.toml")
    target = config.targets["static"]
    result = build_target(config, target, None)
    assert result.error is not None and result.error.kind == "entry-error"
    assert result.error.file == "models/calibrate.py" and result.error.line == 1
    assert "sample 0 is" in result.error.message and "not a tuple" in result.error.message
