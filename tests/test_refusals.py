"""Refusals grouped by cause and place, ranked by what fixing them buys, with library frames,
module paths, precise reasons and per-module coverage (tests/projects/refusals)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

from lowerd.cli.report_table import ReportView, format_report
from lowerd.daemon.diagnostics import lens_title
from lowerd.lowering.build import build_target
from lowerd.lowering.module_coverage import module_coverage
from lowerd.lowering.partition_graph import Impact, PartitionGraph
from lowerd.lowering.reasons import PartitionReasons
from lowerd.project.config import load_config
from lowerd.project.module_paths import collapse_module_paths
from lowerd.project.report_model import MethodReport, coverage_percent
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import PROJECTS, line_marks, lowerd
from stock import importable_copy


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    destination = tmp_path_factory.mktemp("refusals") / "project"
    with importable_copy(PROJECTS / "refusals", destination) as root:
        yield root


@pytest.fixture(scope="module")
def built(project: Path) -> dict[str, tuple[TargetResult, list[MethodReport]]]:
    """Each target built once, with the reports made as soon as it was partitioned."""
    results = {name: build_with_partitioned_report(project, name) for name in ("chain", "layers")}
    shutil.rmtree(project / "build")  # the CLI test below builds afresh
    return results


def build_with_partitioned_report(
    project: Path, name: str
) -> tuple[TargetResult, list[MethodReport]]:
    config = load_config(project / "pyproject.toml")
    partitioned: list[MethodReport] = []
    result = build_target(
        config, config.targets[name], None, on_partitioned=lambda _, r: partitioned.append(r)
    )
    assert result.status == "ok", result.error
    return result, partitioned


def report_of(built: dict, name: str) -> MethodReport:
    return built[name][0].methods["forward"]


def test_the_op_that_splits_the_chain_ranks_first(built: dict, project: Path) -> None:
    report = report_of(built, "chain")
    marks = line_marks(project)
    assert report.subgraphs == 2
    power, cumsum = report.refusals
    assert (power.op, power.boundaries, power.count) == ("aten.pow.Tensor_Scalar", 1, 1)
    assert (power.file, power.line) == marks["chain.pow"]
    # The cumsum leaves more on the CPU but, at the head of the graph, splits nothing.
    assert (cumsum.op, cumsum.boundaries) == ("aten.cumsum.default", 0)
    assert (cumsum.file, cumsum.line) == marks["chain.cumsum"]
    assert cumsum.elements == 2 * 64 > power.elements == 2 * 4
    assert report.partitions_if_fixed == [1, 1]
    assert power.library is None and power.modules is None  # the user's own forward


def test_library_ops_are_grouped_over_their_layers(built: dict, project: Path) -> None:
    report = report_of(built, "layers")
    marks = line_marks(project)
    mean = report.refusals[0]
    assert mean.op == "aten.mean.dim"
    assert mean.reason == "mean.dim only supports averaging 4D tensors, got tensor of rank 3"
    assert mean.count == 3
    assert (mean.library.file, mean.library.line) == marks["lib.mean"]
    assert mean.library.function == "forward"
    assert (mean.file, mean.line) == marks["layers.call"]  # the user's innermost frame
    assert mean.module_paths == [f"model.layers.{i}.norm" for i in range(3)]
    assert mean.modules == "model.layers.{0..2}.norm"
    assert mean.module_class == "RMSNorm"
    # Every layer's mean splits it from the next: delegating them leaves one partition.
    assert report.subgraphs == 4
    assert mean.boundaries == 3
    assert report.partitions_if_fixed[0] == 1

    ops = [op for op in report.not_delegated if op.op == "aten.mean.dim"]
    assert [op.module_path for op in ops] == mean.module_paths
    assert {op.module_class for op in ops} == {"RMSNorm"}
    assert {(op.library.file, op.library.line) for op in ops} == {marks["lib.mean"]}
    assert all(op.elements == 4 for op in ops)  # (1, 4, 1)


def test_invalid_dtype_says_which_input_has_which_dtype(built: dict, project: Path) -> None:
    report = report_of(built, "layers")
    [add] = [op for op in report.not_delegated if op.op == "aten.add.Tensor"]
    assert add.reason == (
        "invalid dtype: input self is int64, input other is int64, output is int64"
        " (XNNPACK takes float32 or float16)"
    )
    assert (add.file, add.line) == line_marks(project)["layers.int64"]


def test_silence_tells_no_support_from_a_config_that_declined() -> None:
    class Ops(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 0) + torch.cat([x, x])[:2]

    graph = torch.export.export(Ops(), (torch.randn(2, 3),)).graph
    nodes = {node.target.__name__: node for node in graph.nodes if node.op == "call_function"}
    reasons = PartitionReasons()
    reasons.note_configs(XnnpackPartitioner(), "XNNPACK")  # partition() never ran: silence

    def reason(name: str) -> str:
        return reasons.reason_for(nodes[name], f"aten.{name}", ["XNNPACK"])

    assert reason("cumsum.default") == "no XNNPACK support for aten.cumsum.default"
    assert reason("add.Tensor") == (
        "XNNPACK has a config for aten.add.Tensor (AddConfig) but it declined without a reason"
    )
    assert reason("cat.default") == (
        "XNNPACK has a config for aten.cat.default (CatConfig) but it declined:"
        " Only support concatenation of 2 - 5 tensors"
    )
    reasons.add(nodes["add.Tensor"], "XNNPACK", "Add node doesn't support alpha != 1")
    assert reason("add.Tensor") == "Add node doesn't support alpha != 1"  # its words, kept


def test_module_coverage_merges_repeated_layers(built: dict) -> None:
    rows = {row.path: row for row in report_of(built, "layers").modules}
    assert list(rows) == ["", "model", "model.layers.*", "model.layers.*.norm", "model.layers.*.fc"]
    fc, norm = rows["model.layers.*.fc"], rows["model.layers.*.norm"]
    assert (fc.module_class, fc.instances, fc.ops, fc.coverage) == ("Linear", 3, 3, 1.0)
    assert (norm.module_class, norm.instances) == ("RMSNorm", 3)
    assert norm.ops - norm.ops_delegated == 3  # the means
    root = rows[""]
    assert (root.module_class, root.ops, root.ops_delegated) == ("Wrapper", 25, 21)
    report = report_of(built, "layers")
    assert (root.ops, root.ops_delegated) == (report.ops, report.ops_delegated)


def test_the_partitioned_report_has_the_same_analysis(built: dict) -> None:
    for name in ("chain", "layers"):
        result, [partitioned] = built[name]
        final = result.methods["forward"]
        assert partitioned.refusals == final.refusals
        assert partitioned.partitions_if_fixed == final.partitions_if_fixed
        assert partitioned.modules == final.modules


def test_json_round_trip_and_moved_lines(built: dict, project: Path) -> None:
    report = report_of(built, "layers")
    stored = json.loads(json.dumps(encode(report)))
    assert decode(MethodReport, stored) == report

    # A report stored before these fields existed still loads.
    for key in ("refusals", "modules", "partitions_if_fixed"):
        del stored[key]
    for op in stored["not_delegated"]:
        for key in ("library", "module_path", "module_class", "elements"):
            del op[key]
    old = decode(MethodReport, stored)
    assert old.refusals == [] and old.not_delegated[0].library is None

    file, line = line_marks(project)["layers.call"]
    moved = decode(MethodReport, encode(report)).with_lines_moved({(file, line): (file, 40)})
    assert (moved.refusals[0].file, moved.refusals[0].line) == (file, 40)
    assert moved.refusals[0].library == report.refusals[0].library  # a library line stays


def test_table_views(built: dict, project: Path) -> None:
    marks = line_marks(project)
    mean, call = ":".join(map(str, marks["lib.mean"])), ":".join(map(str, marks["layers.call"]))
    document = {"targets": [encode(built["layers"][0])]}
    grouped = format_report(document, 1.0)
    assert "fix first (this one would leave 1 of 4 partitions):" in grouped
    assert (
        "      3× aten.mean.dim  mean.dim only supports averaging 4D tensors, got tensor of rank 3"
        "  (merges 3 partitions, 12 elements)\n"
        f"         {mean} (RMSNorm.forward) · in model.layers.{{0..2}}.norm · from {call}\n"
    ) in grouped
    assert "not delegated  aten.mean.dim" not in grouped

    every = format_report(document, 1.0, ReportView(all_ops=True))
    assert every.count("not delegated  aten.mean.dim") == 3
    assert f"({mean} (RMSNorm.forward) in model.layers.1.norm)" in every

    tree = format_report(document, 1.0, ReportView(modules=True)).splitlines()
    [fc] = [line for line in tree if "fc ×3" in line]
    assert fc.split() == ["fc", "×3", "Linear", "3/3", "100", "%"]
    assert tree.index(fc) > tree.index(next(line for line in tree if "layers.* ×3" in line))

    # A row's percent is the server's (ModuleCoverage.percent), shown as sent.
    [root_row, *_] = document["targets"][0]["methods"]["forward"]["modules"]
    root_row.update(ops=271, ops_delegated=270, percent=99)

    def root_line() -> list[str]:
        tree = format_report(document, 1.0, ReportView(modules=True)).splitlines()
        return next(line for line in tree if "(root)" in line).split()

    assert root_line() == ["(root)", "Wrapper", "270/271", "99", "%"]
    del root_row["percent"]  # an older server's row: no percent, none computed here
    assert root_line() == ["(root)", "Wrapper", "270/271"]


def test_collapse_module_paths() -> None:
    paths = [f"m.layers.{i}.{n}" for i in range(4) for n in ("attn_norm", "mlp_norm")]
    assert (
        collapse_module_paths([*paths, "m.norm"]) == "m.layers.{0..3}.{attn_norm,mlp_norm}, m.norm"
    )
    assert collapse_module_paths(["a.0.x", "a.1.x", "a.5.x"]) == "a.{0,1,5}.x"
    assert collapse_module_paths(["", ""]) is None
    layers = [f"model.layers.{i}.input_layernorm" for i in (0, 1, 2, 3, 5, 7, 8)]
    assert collapse_module_paths([*layers, None]) == "model.layers.{0..3,5,7,8}.input_layernorm"
    assert collapse_module_paths(["a.0.x", "a.1.y"]) == "a.0.x, a.1.y"  # no exact single pattern


def test_module_coverage_keeps_apart_indices_of_other_classes() -> None:
    linear, relu = [("", "Seq"), ("0", "Linear")], [("", "Seq"), ("1", "ReLU")]
    rows = module_coverage([(linear, True), (relu, False), ([("", "Seq"), ("2", "Linear")], True)])
    assert [(r.path, r.module_class, r.instances, r.ops) for r in rows] == [
        ("", "Seq", 1, 3),
        ("*", "Linear", 2, 2),
        ("1", "ReLU", 1, 1),
    ]


@pytest.mark.e2e
def test_cli_prints_groups_modules_and_every_op(project: Path, built: dict, tmp_path: Path) -> None:
    built_run = lowerd(project, tmp_path, "build", "chain", "--modules")
    assert built_run.returncode == 0, built_run.log
    lines = built_run.stdout.splitlines()
    assert "    fix first (this one would leave 1 of 2 partitions):" in lines
    assert (
        "      1× aten.pow.Tensor_Scalar  only support power == 2, got 3"
        "  (merges 1 partition, 8 elements)" in lines
    )
    assert "    also on the CPU, most work first:" in lines
    assert any(line.split()[:2] == ["fc1", "Linear"] for line in lines), built_run.log

    # Up to date: the report comes from the build record, with its groups.
    again = lowerd(project, tmp_path, "build", "chain", "--all")
    assert again.returncode == 0, again.log
    assert "up to date" in again.stdout
    assert again.stdout.count("not delegated  aten.") == 2
    assert "fix first" not in again.stdout


def test_a_fix_does_not_merge_across_an_op_left_on_the_cpu() -> None:
    """relu (partition p1) feeds neg and sin, both on the CPU, which feed add (partition p2):
    delegating neg alone would put p1 and p2 in one partition that waits on sin's output,
    itself waiting on p1: a cycle. Only both together merge them."""

    def ops(x):
        a = torch.relu(x)
        return torch.neg(a) + torch.sin(a), torch.cos(x)

    graph = torch.fx.symbolic_trace(ops).graph
    partitions = {"relu": "p1", "add": "p2"}

    def partition_of(node: torch.fx.Node) -> tuple[str, str] | None:
        return (partitions[node.name], "XNNPACK") if node.name in partitions else None

    split = PartitionGraph(graph, partition_of)
    assert split.impact(["neg"]) == Impact(merged=0, partitions_left=2)
    assert split.impact(["neg", "sin"]) == Impact(merged=1, partitions_left=1)
    assert split.impact(["cos"]) == Impact(merged=0, partitions_left=3)  # a partition of its own
    assert split.impacts_cumulative([["neg"], ["sin"], ["cos"]]) == [
        Impact(0, 2),
        Impact(1, 1),
        Impact(1, 2),
    ]


def test_a_real_builds_document_carries_the_coverage_every_view_shows(built: dict) -> None:
    """The sentence, percent and fixes hint are the report's (report_model.coverage_of), in the
    document the CLI, the server and the editors read; the target says its coverage too."""
    result = built["layers"][0]
    document = encode(result)
    method = document["methods"]["forward"]
    report = report_of(built, "layers")
    percent = coverage_percent(report.ops_delegated, report.ops)
    assert method["coverage_percent"] == percent < 100
    assert method["summary"] == (
        f"{report.ops_delegated} of {report.ops} ops on XNNPACK in 4 partitions ({percent} %)"
    )
    assert method["fixes_hint"] == "1 fix would make this 1 partition"
    assert document["coverage"] == {"percent": percent, "backends": ["XNNPACK"]}
    # Shown, not recomputed: the CLI's line and the editor's lens say the report's words.
    assert f"  forward: {method['summary']}\n" in format_report({"targets": [document]}, 1.0)
    lens = lens_title(decode(TargetResult, document), building=False)
    assert lens == f"lowerd: forward: {method['summary']}; {method['fixes_hint']}"
    # Through JSON and back (the build record, the worker pipe): the same result.
    assert encode(decode(TargetResult, json.loads(json.dumps(document)))) == document
