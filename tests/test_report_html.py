"""`lowerd report --html FILE`: the last build's report as one standalone page, made from the
build records without torch, with the partitions, their sizes, the ops left on the CPU at their
lines and each method's graph (a node per op, the CPU's marked), whole in headless Chromium."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cli.report_command import target_page
from lowerd.lowering.build import build_target
from lowerd.project.build_state import load_state
from lowerd.project.config import load_config
from lowerd.project.method_graph import CPU, MAX_NODES, GraphNode, MethodGraph, capped
from lowerd.project.report_model import MethodReport, PartitionSummary
from lowerd.project.report_page import TargetPage, render_page
from lowerd.project.result import TargetResult

from helpers import DEADLINE, PROJECTS, line_marks, lowerd_without_torch
from stock import importable_copy

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """basic/ with `refused` (two partitions around two CPU ops) and `two_methods` built."""
    root = tmp_path_factory.mktemp("html") / "basic"
    with importable_copy(PROJECTS / "basic", root):
        config = load_config(root / "pyproject.toml")
        for name in ("refused", "two_methods"):
            assert build_target(config, config.targets[name], None).ok
        yield root


def report_html(project: Path, tmp_path: Path, *targets: str) -> str:
    page = tmp_path / "report.html"
    run = lowerd_without_torch(project, tmp_path / "cache", "report", *targets, "--html", str(page))
    assert run.returncode == 0, run.log
    assert run.stdout.strip() == f"wrote {page}"
    return page.read_text()


def nodes_of(svg: str) -> list[str]:
    """The class attribute of each node group of an SVG (dot's and the plain layout's alike)."""
    return re.findall(r'<g id="[^"]*node-\d+" class="([^"]*)"', svg)


def svgs(page: str) -> list[str]:
    """The page's SVGs, their character references resolved (dot writes `-` as `&#45;`)."""
    return [html.unescape(svg) for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S)]


def test_the_page_has_partitions_sizes_cpu_lines_and_a_node_per_op(
    project: Path, tmp_path: Path
) -> None:
    page = report_html(project, tmp_path, "refused")
    assert "two_methods" not in page
    config = load_config(project / "pyproject.toml")
    state = load_state(config, config.targets["refused"])
    assert state is not None
    result = state.report
    forward = result.methods["forward"]
    assert forward.graph is not None and result.sizes is not None
    # The partition table: a row per partition with its blob and weight sizes and cache outcome.
    rows = re.findall(r'<tr class="partition" data-partition="(\d)">(.*?)</tr>', page)
    assert [index for index, _ in rows] == ["0", "1"]
    for _, row in rows:
        # Built without a cache: every blob preprocessed and not stored.
        assert all(cell in row for cell in (">XNNPACK<", ">720 B<", ">288 B<", ">not cached<"))
    assert ".pte 4.2 KiB (constants 0 B, delegate blobs 1.4 KiB, delegate weights 576 B)" in page
    assert "planned memory 192 B" in page
    # The ops left on the CPU, at the user's lines: relative text, a vscode:// link.
    marks = line_marks(project)
    for mark in ("refused.pow", "refused.cumsum"):
        file, line = marks[mark]
        assert f'href="vscode://file/{project / file}:{line}"' in page
        assert f">{file}:{line}</a>" in page
    # The graph: linear (partition 0) -> pow -> cumsum (CPU) -> linear (partition 1).
    [svg] = svgs(page)
    classes = nodes_of(svg)
    assert len(classes) == len(forward.graph.nodes) == 4
    assert [c.split()[-1] for c in classes] == ["p0", "cpu", "cpu", "p1"]
    assert svg.count('href="#t-refused-forward-op-') == 2  # each CPU op links to its row
    assert 'id="t-refused-forward-op-aten_pow_tensor_scalar"' in page
    assert re.search(r"<script>.*</script>", page, flags=re.S)
    assert not re.search(r'(src|href)="(https?:)?//', page)  # nothing fetched


def test_the_plain_layout_draws_the_same_nodes(project: Path) -> None:
    config = load_config(project / "pyproject.toml")
    pages = [target_page(config, "refused"), target_page(config, "two_methods")]
    page = render_page("basic", project, pages, use_dot=False)
    assert "drawn by a plain layered layout" in page
    drawn = [nodes_of(svg) for svg in svgs(page)]
    assert drawn == [
        ["node partition p0", "node cpu", "node cpu", "node partition p1"],
        ["node partition p0", "node partition p0"],  # encode: linear -> relu
        ["node partition p0", "node partition p0"],  # decode: linear -> linear
    ]
    # Every edge of the graph is drawn, as a path between the layers.
    assert page.count('class="edge"') == 3 + 1 + 1


def test_a_big_graph_is_collapsed_by_partition_and_the_page_says_so() -> None:
    ops = MAX_NODES + 500
    nodes = [GraphNode("aten.add.Tensor", 0 if i < ops // 2 else 1) for i in range(ops)]
    nodes[ops // 2] = GraphNode("aten.cumsum.default", CPU, "cumsum")
    graph = capped(
        MethodGraph(nodes, [(i, i + 1) for i in range(ops - 1)], ops),
        ["XNNPACK partition 0 (1000 ops)", "XNNPACK partition 1 (999 ops)"],
    )
    assert graph.collapsed and [n.op for n in graph.nodes] == [
        "XNNPACK partition 0 (1000 ops)",
        "aten.cumsum.default",
        "XNNPACK partition 1 (999 ops)",
    ]
    assert graph.edges == [(0, 1), (1, 2)]
    report = MethodReport(0, 0, 2, ops, ops - 1, 0.99, graph=graph)
    report.partitions = [
        PartitionSummary("XNNPACK", 1000, "hit"),
        PartitionSummary("XNNPACK", 999, None),
    ]
    page = render_page(
        "big",
        Path("/p"),
        [TargetPage("big", TargetResult("big", "ok", methods={"forward": report}))],
    )
    assert (
        f"the method has {ops} ops, more than {MAX_NODES}: each partition is drawn as one node"
        in page
    )
    assert len(nodes_of(svgs(page)[0])) == 3


def test_report_prints_the_records_and_names_targets_never_built(
    project: Path, tmp_path: Path
) -> None:
    run = lowerd_without_torch(project, tmp_path / "cache", "report")
    assert run.returncode == 1, run.log  # tiny_linear, dynamic and pkg were never built
    assert "tiny_linear: no build record" in run.stderr
    assert "forward: planned memory 192 B" in run.stdout
    assert "encode: 2 of 2 ops on XNNPACK in 1 partition (100 %)" in run.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_the_page_loads_in_headless_chromium_without_console_messages(
    project: Path, tmp_path: Path
) -> None:
    page = tmp_path / "page.html"
    page.write_text(report_html(project, tmp_path, "refused", "two_methods"))
    done = subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'chromium'}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # A script error, a CSP violation (any fetch) or a log line is a CONSOLE message.
    assert "CONSOLE" not in done.stderr, done.stderr[-3000:]
    assert 'data-ready="1"' in done.stdout  # the page's script ran to its end
    assert len(re.findall(r'class="node ', done.stdout)) == 4 + 2 + 2
