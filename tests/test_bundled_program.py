"""`bundled = true`: <target>.bpte, ExecuTorch's BundledProgram of the program and a test case per
input tuple (the example inputs, then verify_inputs'), with the eager outputs. Its bytes are the
stock script's (`lowerd stock-script`), it is listed in data_files, and ExecuTorch's runtime
loads it and checks the program against its own expected outputs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from executorch.devtools import BundledProgram
from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
from executorch.devtools.bundled_program.serialize import (
    serialize_from_bundled_program_to_flatbuffer,
)
from executorch.extension.pybindings import portable_lib

from lowerd.lowering.build import build_target
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.reproducer import stock_script
from lowerd.project.result import TargetResult

from helpers import PROJECTS
from stock import forget_project_modules, importable_copy, run_stock_script


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectConfig]:
    root = tmp_path_factory.mktemp("bundled") / "runtime"
    with importable_copy(PROJECTS / "runtime", root):
        yield load_config(root / "pyproject.toml")


@pytest.fixture(scope="module")
def built(project: ProjectConfig) -> TargetResult:
    result = build_target(project, project.targets["bundled"], None)
    assert result.ok, result.error
    return result


def bpte_of(result: TargetResult) -> Path:
    [listed] = [file for file in result.data_files if file.kind == "bpte"]
    path = Path(listed.path)
    assert path.name == "bundled.bpte"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == listed.sha256
    return path


def test_the_bpte_is_the_stock_scripts(
    project: ProjectConfig, built: TargetResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bpte = bpte_of(built)
    script = stock_script(project, project.targets["bundled"])
    assert "BundledProgram(manager, test_suites)" in script
    forget_project_modules(project.root)
    written = run_stock_script(script, tmp_path / "out", monkeypatch)
    assert written == {
        "bundled.pte": built.sha256,
        "bundled.bpte": hashlib.sha256(bpte.read_bytes()).hexdigest(),
    }


def test_the_runtime_checks_the_program_against_its_bundled_outputs(built: TargetResult) -> None:
    bundle = portable_lib._load_bundled_program_from_buffer(bpte_of(built).read_bytes())
    for case in range(3):  # the example inputs, then verify_inputs' two tuples
        outputs = bundle.verify_result_with_bundled_expected_output("forward", case, 1e-4, 1e-5)
        assert [tuple(output.shape) for output in outputs] == [(2, 8)]
    with pytest.raises(Exception):  # noqa: B017, PT011 (the runtime raises a plain error)
        bundle.verify_result_with_bundled_expected_output("forward", 3)  # no fourth case
    # The check can fail: the same program bundled with wrong expected outputs is refused.
    wrong = BundledProgram(
        None,
        [MethodTestSuite("forward", [MethodTestCase([torch.randn(2, 8)], [torch.zeros(2, 8)])])],
        pte_file_path=built.output,
    )
    refused = portable_lib._load_bundled_program_from_buffer(
        serialize_from_bundled_program_to_flatbuffer(wrong)
    )
    with pytest.raises(RuntimeError, match="verification failed"):
        refused.verify_result_with_bundled_expected_output("forward", 0, 1e-4, 1e-5)


def test_a_kept_program_keeps_its_bpte_and_turning_it_off_removes_it(
    project: ProjectConfig, built: TargetResult
) -> None:
    bpte = bpte_of(built)
    forget_project_modules(project.root)
    kept = build_target(project, project.targets["bundled"], None)
    assert kept.reused == "same-program"
    assert bpte_of(kept).read_bytes() == bpte.read_bytes()
    from dataclasses import replace

    off = replace(project.targets["bundled"], bundled=False)
    forget_project_modules(project.root)
    unbundled = build_target(project, off, None)
    assert unbundled.ok and not [f for f in unbundled.data_files if f.kind == "bpte"]
    assert not bpte.exists()
