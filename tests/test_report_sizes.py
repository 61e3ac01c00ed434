"""The sizes in every report are true: the .pte's bytes are the file's, a method's planned memory
is what the .pte's execution plan (and the stock lowering's) says, the partitions' blobs and named
data add up to what the .pte holds, and a CPU op's weight counts as a constant."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir._serialize._program import deserialize_pte_binary

from lowerd.cli.report_table import format_report
from lowerd.lowering.build import build_target
from lowerd.project.build_state import up_to_date_report
from lowerd.project.config import load_config
from lowerd.project.result import TargetResult
from lowerd.project.wire import encode

from helpers import PROJECTS
from stock import call_entry, importable_copy


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """basic/ with datafiles' Lookup (an embedding left on the CPU: a constant of the program)
    as a target `lookup`."""
    root = tmp_path_factory.mktemp("sizes") / "basic"
    with importable_copy(PROJECTS / "basic", root):
        (root / "models" / "lookup.py").write_text(
            (PROJECTS / "datafiles" / "models" / "lookup.py").read_text()
        )
        with (root / "pyproject.toml").open("a") as pyproject:
            pyproject.write(
                textwrap.dedent("""
                [tool.lowerd.targets.lookup]
                entry = "models/lookup.py:make"
                """)
            )
        yield root


@pytest.fixture(scope="module")
def built(project: Path) -> dict[str, TargetResult]:
    config = load_config(project / "pyproject.toml")
    results = {}
    for name in ("refused", "two_methods", "lookup"):
        results[name] = build_target(config, config.targets[name], None)
        assert results[name].ok, results[name].error
    return results


def test_sizes_agree_with_the_pte_written(built: dict[str, TargetResult]) -> None:
    for name, result in built.items():
        sizes = result.sizes
        assert sizes is not None and result.output is not None
        data = Path(result.output).read_bytes()
        assert sizes.pte_bytes == len(data), name
        written = deserialize_pte_binary(data)  # its segments moved back into the program
        program = written.program
        planned = {plan.name: sum(plan.non_const_buffer_sizes) for plan in program.execution_plan}
        assert {m: r.planned_memory_bytes for m, r in result.methods.items()} == planned, name
        blobs = [len(delegate.data) for delegate in program.backend_delegate_data]
        assert sizes.delegate_blob_bytes == sum(blobs), name
        # No two partitions of these programs share a blob (ExecuTorch stores equal blobs once).
        partitions = [p for report in result.methods.values() for p in report.partitions]
        assert sorted(p.blob_bytes for p in partitions) == sorted(blobs), name
        named = written.named_data.buffers if written.named_data else []
        assert sizes.delegate_data_bytes == sum(len(buffer) for buffer in named), name
        constants = sum(len(buffer.storage) for buffer in program.constant_buffer)
        assert sizes.constant_bytes == constants, name


def test_planned_memory_is_the_stock_lowerings(
    project: Path, built: dict[str, TargetResult]
) -> None:
    model, args = call_entry(project, "models/refused.py:make")
    edge = to_edge_transform_and_lower(
        {"forward": torch.export.export(model, args)}, partitioner=[XnnpackPartitioner()]
    )
    [plan] = edge.to_executorch().executorch_program.execution_plan
    assert built["refused"].methods["forward"].planned_memory_bytes == sum(
        plan.non_const_buffer_sizes
    )
    assert sum(plan.non_const_buffer_sizes) > 0


def test_a_cpu_ops_weight_is_a_constant_and_shared_weights_count_once(
    built: dict[str, TargetResult],
) -> None:
    lookup = built["lookup"]
    assert lookup.sizes is not None
    # Embedding(16, 8) of float32 stays on the CPU; the Linear's weights are XNNPACK's.
    assert lookup.sizes.constant_bytes == 16 * 8 * 4
    assert lookup.methods["forward"].constant_bytes == 16 * 8 * 4
    assert lookup.sizes.delegate_data_bytes == (8 * 8 + 8) * 4
    # encode and decode share one Linear(8, 8): its weights are stored once, counted in both.
    two = built["two_methods"]
    assert two.sizes is not None
    each = [sum(p.data_bytes or 0 for p in r.partitions) for r in two.methods.values()]
    assert sorted(each) == [(8 * 8 + 8) * 4, (8 * 8 + 8 + 8 * 4 + 4) * 4]
    assert two.sizes.delegate_data_bytes == (8 * 8 + 8 + 8 * 4 + 4) * 4


def test_sizes_are_kept_by_a_reused_build_and_shown(
    project: Path, built: dict[str, TargetResult]
) -> None:
    config = load_config(project / "pyproject.toml")
    target = config.targets["refused"]
    recorded = up_to_date_report(config, target)
    assert recorded is not None and recorded.reused == "up-to-date"
    again = build_target(config, target, None)  # the same program: the .pte is kept
    assert again.reused == "same-program"
    first = built["refused"]
    for result in (recorded, again):
        assert result.sizes == first.sizes
        assert [p.blob_bytes for p in result.methods["forward"].partitions] == [
            p.blob_bytes for p in first.methods["forward"].partitions
        ]
        assert result.methods["forward"].planned_memory_bytes == (
            first.methods["forward"].planned_memory_bytes
        )
    document = {"targets": [encode(r) for r in built.values()]}
    text = format_report(document, 1.0)
    assert ".pte 4.2 KiB (constants 0 B, delegate blobs 1.4 KiB, delegate weights 576 B); " in text
    assert "forward: planned memory 192 B" in text
    assert "encode: planned memory 192 B, decode: planned memory 160 B" in text
    assert "(constants 512 B, " in text
