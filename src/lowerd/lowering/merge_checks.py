"""XNNPACK's merge checks answered from per-partition sets (partition_speedups.py, shortcut 1).

`GroupBasedPartitioner._merge_partitions` asks `_can_merge_partitions` of every pair of proposed
partitions, and ExecuTorch's answer rebuilds both partitions' node sets and walks every node's
users for each pair, then runs `validate_partition`'s breadth-first search over the graph below
the pair for each pair that passes: work per pair that grows with the graph, for a number of
pairs that grows with the square of its depth. MergeChecks gives the same boolean:

- a partition's node set and its external users (users of its nodes outside it) are computed
  once per size the partition has during the merge: a merge only adds nodes (p2's into p1), so a
  size names one content;
- the pair's external users, ExecuTorch's "users of the combined nodes outside them", are the
  external users of either partition not in the other; the pair cannot merge when one of them
  has a node of the pair in the viewer's downstream set (ExecuTorch's test, as set operations);
- `validate_partition` returns False exactly when a node reachable from an external user is in
  the pair. The viewer's downstream set of a node is every node reachable from it when the graph
  still has the structure the viewer was built from and is in topological order (the viewer
  walks it backwards, each node's set made of its users' finished ones), so then the test above
  has already answered it. Otherwise (the structure changed since, or the order is not
  topological) `validate_partition` runs, as in ExecuTorch.
"""

from __future__ import annotations

from typing import Any


def graph_structure(graph: Any) -> list[Any]:
    """Each node with its users, in order: what the partitioner's dependency viewer reads."""
    return [(node, *node.users) for node in graph.nodes]


class MergeChecks:
    """The merge checks of one `_merge_partitions` call on one partitioner's partitions."""

    def __init__(self, partitioner: Any, partitions_by_id: Any, viewed: list[Any] | None):
        self.partitioner, self.partitions_by_id = partitioner, partitions_by_id
        self.downstreams_of = partitioner.dependency_viewer.downstreams_of
        graph = partitioner.graph_module.graph
        current = graph_structure(graph)
        self.viewer_exact = viewed is not None and viewed == current and _topological(current)
        self._sets: dict[Any, tuple[int, frozenset[Any], frozenset[Any]]] = {}

    def serves(self, partitioner: Any, partitions_by_id: Any) -> bool:
        return partitioner is self.partitioner and partitions_by_id is self.partitions_by_id

    def can_merge(self, p1: Any, p2: Any) -> bool:
        nodes1, users1 = self._of(p1)
        nodes2, users2 = self._of(p2)
        combined = nodes1 | nodes2
        for external in (users1 - nodes2) | (users2 - nodes1):
            if not self.downstreams_of(external).isdisjoint(combined):
                return False
        if self.viewer_exact:
            return True
        from torch.fx.passes.utils.fuser_utils import validate_partition

        return bool(validate_partition(list(combined)))

    def _of(self, partition_id: Any) -> tuple[frozenset[Any], frozenset[Any]]:
        nodes = self.partitions_by_id[partition_id].nodes
        known = self._sets.get(partition_id)
        if known is not None and known[0] == len(nodes):
            return known[1], known[2]
        members = frozenset(nodes)
        users = frozenset(user for node in members for user in node.users if user not in members)
        self._sets[partition_id] = (len(nodes), members, users)
        return members, users


def _topological(structure: list[Any]) -> bool:
    """Whether every node's users come after it."""
    position = {entry[0]: index for index, entry in enumerate(structure)}
    return all(
        position.get(user, -1) > index
        for index, (_, *users) in enumerate(structure)
        for user in users
    )
