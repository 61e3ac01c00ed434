"""Loadability against a runtime: the kernels and backends a .pte needs, read from the program
ExecuTorch emitted, against this host's runtime or a declared device runtime ([runtime] ops and
backends); what it lacks is an error at the op's line. `lowerd oplist` writes the op list
ExecuTorch's gen_oplist writes, which torchgen's parser reads back and lowerd accepts as a
runtime."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from executorch.codegen.tools.gen_oplist import gen_oplist
from executorch.extension.pybindings import portable_lib
from lsprotocol import types
from torchgen.selective_build.selector import SelectiveBuilder

from lowerd.cli.main import main
from lowerd.cli.report_table import format_report
from lowerd.cli.verify_table import format_verification
from lowerd.daemon.diagnostics import result_diagnostics
from lowerd.lowering.build import build_target
from lowerd.lowering.loadability import needs_of_file
from lowerd.project.batch import Batch
from lowerd.project.config import load_config
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import PROJECTS, assert_config_error, line_marks
from stock import importable_copy

CUMSUM = "aten::cumsum.out"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("runtime") / "runtime"
    with importable_copy(PROJECTS / "runtime", root):
        yield root


@pytest.fixture(scope="module")
def built(project: Path) -> dict[str, TargetResult]:
    config = load_config(project / "pyproject.toml")
    return {
        name: build_target(config, config.targets[name], None)
        for name in ("host", "device", "no_xnnpack")
    }


def test_the_host_runtime_loads_what_the_program_needs(built: dict[str, TargetResult]) -> None:
    runtime = built["host"].runtime
    assert built["host"].ok and runtime is not None
    assert runtime.runtime == "this host's runtime" and runtime.loads
    # What the program's execution plan calls: the portable cumsum between two XNNPACK delegates.
    assert list(runtime.needs.kernels) == [CUMSUM]
    assert runtime.needs.backends == ["XnnpackBackend"]
    assert CUMSUM in portable_lib._get_operator_names()
    # A kept .pte whose record predates the needs reads them from its bytes: the same needs.
    assert needs_of_file(Path(built["host"].output or "")) == runtime.needs


def test_a_kernel_the_device_lacks_is_an_error_at_its_line(
    project: Path, built: dict[str, TargetResult]
) -> None:
    result = built["device"]
    assert result.ok and result.runtime is not None and not result.loads
    [problem] = result.runtime.problems
    assert (problem.kind, problem.name) == ("missing-kernel", CUMSUM)
    assert (problem.file, problem.line) == line_marks(project)["scan.cumsum"]
    assert "not in the op list device_ops.yaml" in problem.message
    assert "OperatorMissing" in problem.message
    # The editor: an Error at the cumsum line; the CLI: the error under the target.
    found = result_diagnostics(result, project, None, "warning")
    errors = [
        (path, d.range.start.line + 1)
        for path, diagnostics in found.items()
        for d in diagnostics
        if d.severity == types.DiagnosticSeverity.Error and d.code == "missing-kernel"
    ]
    file, line = line_marks(project)["scan.cumsum"]
    assert errors == [(project / file, line)]
    # What the worker pipe, the build record and --json carry reads back as it was written.
    carried = decode(TargetResult, json.loads(json.dumps(encode(result))))
    assert carried.runtime == result.runtime
    text = format_report({"targets": [encode(result)]}, 1.0)
    assert f"error: {file}:{line}: {CUMSUM} is not in the op list device_ops.yaml" in text


def test_a_backend_the_device_does_not_register_is_an_error_at_its_first_partition(
    project: Path, built: dict[str, TargetResult]
) -> None:
    result = built["no_xnnpack"]
    assert result.runtime is not None
    [problem] = result.runtime.problems
    assert (problem.kind, problem.name) == ("unregistered-backend", "XnnpackBackend")
    assert (problem.file, problem.line) == line_marks(project)["scan.first"]
    assert "backends [VulkanBackend]" in problem.message


def test_a_build_that_would_not_load_fails(project: Path, built: dict[str, TargetResult]) -> None:
    config = load_config(project / "pyproject.toml")
    for name, outcome, verdict in (
        ("host", "ok", "ok"),
        ("device", "target_failed", "does-not-load"),
    ):
        batch = Batch(config, [config.targets[name]], use_cache=True, results={name: built[name]})
        document, said = batch.outcome()
        assert said == outcome
        # --json: the build stands (status), the command's verdict on the target does not
        assert [(t["status"], t["verdict"]) for t in document["targets"]] == [("ok", verdict)]
        assert Path(built[name].output or "").is_file()  # written all the same


def test_verify_fails_a_program_its_declared_runtime_cannot_load(
    project: Path, tmp_path: Path
) -> None:
    """`lowerd verify` of the device target: not this host's PASS (its runtime has cumsum) but
    an error at the cumsum line, in the table and in --json (issue 32 point 4). Built into a
    folder of its own, so the module's builds and records stay as they were."""
    config = load_config(project / "pyproject.toml").with_verify(["device"])
    config = replace(config, out_dir=tmp_path)
    result = build_target(config, config.targets["device"], None)
    assert result.verification is not None
    document = {"targets": [json.loads(json.dumps(encode(result)))]}
    verification = document["targets"][0]["verification"]
    assert verification["verdict"] == "error", verification
    file, line = line_marks(project)["scan.cumsum"]
    missing = f"{file}:{line}: {CUMSUM} is not in the op list device_ops.yaml"
    assert missing in verification["error"]
    shown = format_verification(document)
    assert shown.startswith("device: ERROR  (the op list device_ops.yaml, "), shown
    assert f"\n  {missing}: the method cannot load (OperatorMissing)\n" in shown, shown
    batch = Batch(config, [config.targets["device"]], use_cache=True, results={"device": result})
    document, outcome = batch.outcome()
    assert outcome == "target_failed"
    assert document["targets"][0]["verdict"] == "does-not-load"  # never "ok" (issue 32 §4)


def test_oplist_is_gen_oplists_and_declares_a_runtime_that_loads(
    project: Path, built: dict[str, TargetResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    ours = project / "oplist.yaml"
    assert main(["oplist", "host", "-o", str(ours)]) == 0  # up to date: read from its record
    # ExecuTorch's own gen_oplist on the .pte writes the same bytes.
    gen_oplist(output_path=project / "stock.yaml", model_file_path="build/host.pte")
    assert ours.read_bytes() == (project / "stock.yaml").read_bytes()
    # torchgen's parser, which ExecuTorch's selective build uses, reads it back.
    selector = SelectiveBuilder.from_yaml_path(str(ours))
    assert selector.is_operator_selected(CUMSUM)
    host = built["host"].runtime
    assert host is not None and selector.et_kernel_metadata == {CUMSUM: host.needs.kernels[CUMSUM]}
    # Declared as the device's runtime, the list is enough: the device target now loads.
    (project / "device_ops.yaml").write_text(ours.read_text())
    config = load_config(project / "pyproject.toml")
    rebuilt = build_target(config, config.targets["device"], None)
    assert rebuilt.runtime is not None and rebuilt.runtime.loads, rebuilt.runtime
    assert rebuilt.reused == "same-program"  # a new runtime checks the program, never relowers it


def test_a_functions_yaml_op_list_is_read_too(project: Path, tmp_path: Path) -> None:
    """The `- op: cumsum.out` list form (ExecuTorch's functions.yaml), by gen_oplist's reader."""
    from lowerd.lowering.loadability import target_runtime

    (project / "functions.yaml").write_text("- op: cumsum.out\n- op: add.out\n")
    text = (project / "pyproject.toml").read_text()
    text = text.replace('runtime.ops = "device_ops.yaml"', 'runtime.ops = "functions.yaml"')
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "functions.yaml").write_text((project / "functions.yaml").read_text())
    config = load_config(tmp_path / "pyproject.toml")
    runtime = target_runtime(config, config.targets["device"])
    assert runtime.has_kernel(CUMSUM) and not runtime.has_kernel("aten::mm.out")
    assert runtime.has_kernel("executorch_prim::et_view.default")  # the core's prim ops


def test_runtime_keys_are_checked_at_their_lines(tmp_path: Path) -> None:
    header = '[tool.lowerd.targets.t]\nentry = "m.py:make"\n'
    assert_config_error(
        tmp_path, header + 'runtime.ops = "missing.yaml"\n', 3, ["no file 'missing.yaml'"]
    )
    assert_config_error(
        tmp_path, header + 'runtime.backends = "XnnpackBackend"\n', 3, ["array of backend ids"]
    )
    assert_config_error(tmp_path, header + "runtime.kernels = []\n", 3, ["unknown key 'kernels'"])
    (tmp_path / "bad.yaml").write_text("operators: [1, 2]\nsurprise: true\n")
    config_text = '[tool.lowerd.runtime]\nops = "bad.yaml"\n' + header
    (tmp_path / "pyproject.toml").write_text(config_text)
    from lowerd.lowering.loadability import target_runtime
    from lowerd.project.errors import ConfigError

    config = load_config(tmp_path / "pyproject.toml")
    with pytest.raises(ConfigError) as error:
        target_runtime(config, config.targets["t"])
    assert error.value.location.line == 2 and "no op list ExecuTorch reads" in error.value.message
