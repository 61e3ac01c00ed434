"""ExecuTorch's partitioning with lowerd's shortcuts (lowering/partition_speedups.py) gives stock's
partitions and bytes.

Stock here is tests/stock.py: a plain ExecuTorch run with nothing of lowerd's installed.
"""

from __future__ import annotations

from typing import Any

import pytest

from lowerd.lowering import partition_speedups
from lowerd.lowering.partition_speedups import PartitionSpeedups

from stock import PROJECTS, call_entry, sha256, stock_pte

LLAMA = PROJECTS / "llama"
ENTRY = "models/llama.py:make"


def test_a_llama_partitioned_with_the_shortcuts_is_stock_s_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every merge check answers as ExecuTorch's own, and the partitions are cut out with one
    recompile: the .pte is stock's."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.backend.canonical_partitioners.group_partitioner import (
        GroupBasedPartitioner,
    )

    from testkit.stock_lowering import lower_stock

    stock = stock_pte(LLAMA, ENTRY, ["xnnpack"])
    executorch_s = GroupBasedPartitioner._can_merge_partitions
    ours = partition_speedups._can_merge_partitions
    answers: list[tuple[bool, bool]] = []

    def both(partitioner: Any, p1: Any, p2: Any, partitions_by_id: Any) -> bool:
        answer = ours(partitioner, p1, p2, partitions_by_id)
        answers.append((answer, executorch_s(partitioner, p1, p2, partitions_by_id)))
        return answer

    monkeypatch.setattr(partition_speedups, "_can_merge_partitions", both)
    speedups = PartitionSpeedups()
    with speedups.installed():
        edge, buffer = lower_stock(call_entry(LLAMA, ENTRY), [XnnpackPartitioner()])

    assert sha256(buffer) == sha256(stock)
    assert answers and all(mine == theirs for mine, theirs in answers)
    assert {mine for mine, _ in answers} == {True, False}  # both branches were asked
    assert speedups.merge_checks == len(answers)
    delegates = [n for n in edge.exported_program().graph.nodes if n.op == "get_attr"]
    assert speedups.recompiles_held == len(delegates) > 1
    # ExecuTorch's functions are back once it is uninstalled.
    assert GroupBasedPartitioner._can_merge_partitions is executorch_s


def test_other_versions_run_executorch_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from executorch.exir import lowered_backend_module
    from executorch.exir.backend.canonical_partitioners.group_partitioner import (
        GroupBasedPartitioner,
    )

    monkeypatch.setattr(partition_speedups, "validated_versions", lambda: False)
    before = (GroupBasedPartitioner._can_merge_partitions, lowered_backend_module.legalize_graph)
    with PartitionSpeedups().installed():
        during = (
            GroupBasedPartitioner._can_merge_partitions,
            lowered_backend_module.legalize_graph,
        )
    assert during == before
