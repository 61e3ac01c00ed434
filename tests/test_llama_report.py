"""The report of a real model as a new user builds it: transformers' Llama in a three-line
wrapper (tests/projects/llama). Its refusals repeat per layer and come from library code."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cli.report_table import format_report
from lowerd.lowering.build import build_target
from lowerd.project.config import load_config
from lowerd.project.report_model import MethodReport
from lowerd.project.wire import decode, encode

from helpers import PROJECTS, line_marks
from stock import importable_copy

pytest.importorskip("transformers")

MODELING_LLAMA = "transformers/models/llama/modeling_llama.py"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with importable_copy(PROJECTS / "llama", tmp_path_factory.mktemp("llama") / "project") as root:
        yield root


@pytest.fixture(scope="module")
def document(project: Path) -> dict:
    config = load_config(project / "pyproject.toml")
    result = build_target(config, config.targets["llama"], None)
    assert result.status == "ok", result.error
    return {"targets": [encode(result)]}


@pytest.fixture(scope="module")
def report(document: dict) -> MethodReport:
    return decode(MethodReport, document["targets"][0]["methods"]["forward"])


def test_rmsnorm_mean_ranks_first_at_its_library_line(report: MethodReport, project: Path) -> None:
    mean = report.refusals[0]
    assert mean.op == "aten.mean.dim"
    assert mean.reason == "mean.dim only supports averaging 4D tensors, got tensor of rank 3"
    assert mean.count == 5  # two per layer and the final norm
    assert mean.library.file.endswith(MODELING_LLAMA)
    assert mean.library.function == "forward"
    assert "mean(-1" in Path(mean.library.file).read_text().splitlines()[mean.library.line - 1]
    assert mean.module_class == "LlamaRMSNorm"
    assert mean.modules == (
        "model.model.layers.{0,1}.{input_layernorm,post_attention_layernorm}, model.model.norm"
    )
    assert (mean.file, mean.line) == line_marks(project)["llama.call"]
    assert mean.boundaries >= 4  # each norm splits its layer
    assert report.partitions_if_fixed[0] <= report.subgraphs - mean.boundaries


def test_every_refused_op_has_a_library_line_and_a_module(report: MethodReport) -> None:
    for op in report.not_delegated:
        assert op.library is not None, op
        assert op.module_path is not None and op.module_class, op
    assert sum(group.count for group in report.refusals) == len(report.not_delegated)
    ranks = [(-g.boundaries, -g.elements, -g.count) for g in report.refusals]
    assert ranks == sorted(ranks)


def test_int64_mask_ops_name_their_dtype(report: MethodReport) -> None:
    vague = [op for op in report.not_delegated if op.reason == "invalid dtype"]
    assert not vague
    precise = [op for op in report.not_delegated if op.reason.startswith("invalid dtype: ")]
    assert precise and all("int64" in op.reason or "bool" in op.reason for op in precise)


def test_module_coverage_over_layers(report: MethodReport) -> None:
    rows = {row.path: row for row in report.modules}
    mlp = rows["model.model.layers.*.mlp"]
    assert (mlp.module_class, mlp.instances, mlp.coverage) == ("LlamaMLP", 2, 1.0)
    assert rows["model.model.layers.*.input_layernorm"].coverage < 1.0
    assert rows[""].ops == report.ops


def test_table_fits_a_screen(document: dict) -> None:
    lines = format_report(document, 1.0).splitlines()
    assert lines[1].lstrip().startswith(".pte ")  # the target's sizes, then its method
    refusals = lines[3:-2]  # after the target's, sizes and method's lines, before the summary
    assert len(refusals) <= 15, "\n".join(lines)
    assert refusals[0].startswith("    fix first")
    assert refusals[1].startswith("      5× aten.mean.dim  mean.dim only supports")
    assert f"{MODELING_LLAMA}:" in refusals[2] and "(LlamaRMSNorm.forward)" in refusals[2]
    assert re.fullmatch(r"    … \d+ more groups \(\d+ ops\); --all lists every op", refusals[-1])
