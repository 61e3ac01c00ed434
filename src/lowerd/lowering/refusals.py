"""The not-delegated ops of a method grouped by cause and place, most costly first.

A real model repeats its refusals per layer: every RMSNorm's mean, every mask's unsqueeze. One
group holds the ops of one op, one reason and one library line (the user's line when no library
made them), with the modules they repeat over. What a group costs:

- `boundaries`: partitions that would merge if its ops were delegated (partition_graph.py), the
  cost that splits a model into many small delegate calls;
- `elements`: the elements its ops output, an estimate of the work left on the CPU.

Groups rank by boundaries, then elements, then count: fixing the RMSNorm mean that splits every
layer comes before the int64 mask arithmetic that costs nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from lowerd.lowering.partition_graph import PartitionGraph
from lowerd.project.module_paths import collapse_module_paths
from lowerd.project.report_model import NotDelegatedOp, RefusalGroup


def output_elements(val: Any) -> int:
    """Elements of a node's meta["val"] (a tensor or a tuple of them); a symbolic size counts at
    its example value."""
    if isinstance(val, tuple | list):
        return sum(output_elements(v) for v in val)
    numel = getattr(val, "numel", None)
    if numel is None:
        return 0
    count = numel()
    if isinstance(count, int):
        return count
    hint = getattr(getattr(count, "node", None), "hint", None)
    return int(hint) if isinstance(hint, int) else 0


def refusal_groups(
    ops: Sequence[NotDelegatedOp], graph: PartitionGraph
) -> tuple[list[RefusalGroup], list[int]]:
    """The groups, ranked, and the partitions left after fixing the top 1, 2, … of them."""
    by_cause: dict[tuple[Any, ...], list[NotDelegatedOp]] = {}
    for op in ops:
        place = (op.library.file, op.library.line) if op.library else (op.file, op.line)
        by_cause.setdefault((op.op, op.reason, *place), []).append(op)
    groups = [_group(members) for members in by_cause.values()]
    for group in groups:
        group.boundaries = graph.impact(group.nodes).merged
    groups.sort(key=lambda g: (-g.boundaries, -g.elements, -g.count))
    left = [impact.partitions_left for impact in graph.impacts_cumulative(g.nodes for g in groups)]
    return groups, left


def _group(ops: list[NotDelegatedOp]) -> RefusalGroup:
    first = ops[0]
    user_line, _ = Counter((op.file, op.line) for op in ops).most_common(1)[0]
    paths = list(dict.fromkeys(op.module_path for op in ops if op.module_path is not None))
    classes = {op.module_class for op in ops}
    return RefusalGroup(
        op=first.op,
        reason=first.reason,
        count=len(ops),
        file=user_line[0],
        line=user_line[1],
        library=first.library,
        nodes=[op.node for op in ops],
        module_paths=paths,
        modules=collapse_module_paths(paths),
        module_class=classes.pop() if len(classes) == 1 else None,
        elements=sum(op.elements for op in ops),
    )
