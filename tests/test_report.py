"""The delegation report agrees with ExecuTorch's own tool and blames the user's lines."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.devtools.backend_debug import get_delegation_info
from executorch.exir import to_edge_transform_and_lower

from lowerd.lowering.build import build_target
from lowerd.project.config import load_config
from lowerd.project.report_model import MethodReport

from helpers import PROJECTS
from stock import call_entry, importable_copy


def marked_line(file: Path, mark: str) -> int:
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        if re.search(rf"LINE-MARK: {re.escape(mark)}\s*$", line):
            return number
    raise AssertionError(f"no LINE-MARK {mark} in {file}")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private copy of tests/projects/basic, which the tests only read."""
    with importable_copy(PROJECTS / "basic", tmp_path_factory.mktemp("basic") / "basic") as root:
        yield root


@pytest.fixture(scope="module")
def report(project: Path) -> MethodReport:
    """`refused` built once, without a cache: its forward's report, which the tests only read."""
    config = load_config(project / "pyproject.toml")
    result = build_target(config, config.targets["refused"], None)
    assert result.status == "ok", result.error
    return result.methods["forward"]


def test_refused_ops_are_reported_with_reasons_at_user_lines(
    project: Path, report: MethodReport
) -> None:
    source = project / "models" / "refused.py"

    by_op = {op.op: op for op in report.not_delegated}
    assert set(by_op) == {"aten.pow.Tensor_Scalar", "aten.cumsum.default"}
    pow_op, cumsum = by_op["aten.pow.Tensor_Scalar"], by_op["aten.cumsum.default"]
    assert (pow_op.file, pow_op.line) == ("models/refused.py", marked_line(source, "refused.pow"))
    assert pow_op.reason == "only support power == 2, got 3"
    assert cumsum.line == marked_line(source, "refused.cumsum")
    assert cumsum.reason == "no XNNPACK support for aten.cumsum.default"


def test_counts_agree_with_get_delegation_info(project: Path, report: MethodReport) -> None:
    model, args = call_entry(project, "models/refused.py:make")
    edge = to_edge_transform_and_lower(
        {"forward": torch.export.export(model, args)}, partitioner=[XnnpackPartitioner()]
    )
    info = get_delegation_info(edge.exported_program().graph_module)
    assert report.delegated_nodes == info.num_delegated_nodes
    assert report.non_delegated_nodes == info.num_non_delegated_nodes
    assert report.subgraphs == info.num_delegated_subgraphs == 2

    # lowerd's own count leaves out getitem/bookkeeping nodes that no backend could take.
    assert report.ops == report.ops_delegated + len(report.not_delegated)
    assert report.non_delegated_nodes > len(report.not_delegated)
    assert report.coverage == round(report.ops_delegated / report.ops, 4)
    assert report.backends == {"XNNPACK": {"ops": report.ops_delegated, "partitions": 2}}
