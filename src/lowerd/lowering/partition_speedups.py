"""Exact shortcuts through ExecuTorch's partitioning, installed only while lowerd lowers (issue 23).

Two steps of `to_edge_transform_and_lower` grow faster than the model: on a transformers Llama
they made the partitioning stage grow with the square of its depth and beyond. Each shortcut
gives the same partitions, in the same graph, as the step it replaces:
tests/test_partition_speedups.py compares the bytes with stock's.

1. The merge checks of XNNPACK's partitioner. `GroupBasedPartitioner._merge_partitions` tries
   every pair of proposed partitions; `_can_merge_partitions` refuses a pair when a node outside
   it that uses one of its nodes has a node of the pair downstream, asked as
   `any(n in combined for n in downstreams)` over the node's whole transitive downstream set: a
   Python loop over O(nodes) per external user, per pair. The same question is
   `not downstreams.isdisjoint(combined)`, one set operation in C. The pair's nodes, their
   external users, the order of the checks and the `validate_partition` that follows are
   ExecuTorch's; only how that one boolean is computed differs. The pairs are all pairs of
   proposed partitions (their count grows with the square of the model's depth), so the rest of
   the check is made cheap too: each partition's node set and external users are computed once
   per size it has during the merge (merges only grow a partition), the pair's external users
   are those of either partition not in the other (ExecuTorch's "users of the combined nodes
   outside them"), and `validate_partition`'s breadth-first search, which asks "does a path
   leaving the pair come back into it?", is not run where the downstream sets already answered
   that: when the graph has the structure (each node's users) the partitioner's dependency
   viewer was built from, in topological order, the viewer's downstream set of a node is every
   node reachable from it, so "no external user has a pair node downstream" is the BFS's "no
   cycle". Where the structure changed or is not in order, the BFS runs as in ExecuTorch.

2. One recompile of the graph after cutting the partitions out, not one per partition.
   `create_submodule_from_nodes` ends each cut with torch's `legalize_graph`, which copies the
   top-level graph in topological order and assigns the copy to the GraphModule, whose setter
   recompiles its Python code and that of every submodule: per partition, code for the whole
   graph and every partition cut so far is generated and compiled. While
   `_create_partitions_in_graph_module` runs, the graph is still legalized and assigned but the
   recompile is held back, and made once when it returns, on the graph as it ends. Nothing in
   between runs that code: the cuts read and edit the graph, and the partitions' programs are
   built from their own graphs. `recompile` derives the code from the graph alone, so the module
   ends with the code the last per-partition recompile would give.

3. No copy of the whole graph per partition. Within a cut, legalize_graph is
   lowering/graph_legalize.py's `legalize_in_place`: the same order and the same graph state as
   the copy, reached by moving the nodes instead of copying them (its docstring says why that is
   the same graph for ExecuTorch).

All are active only with the torch and ExecuTorch versions this argument was checked against
(edge_speedups.validated_versions); with any other, ExecuTorch runs as it is.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lowerd.lowering.edge_speedups import validated_versions

_MERGE_NAMES = ("__init__", "_merge_partitions", "_can_merge_partitions")


@dataclass
class PartitionSpeedups:
    merge_checks: int = 0  # _can_merge_partitions answered with the set test
    recompiles_held: int = 0  # legalize_graph recompiles held back to the end of the cut
    legalized_in_place: int = 0  # legalize_graph calls answered without copying the graph

    @contextmanager
    def installed(self) -> Iterator[PartitionSpeedups]:
        """Install both shortcuts until exit, then put ExecuTorch's functions back."""
        if not validated_versions():
            yield self
            return
        with self._merge_checks(), self._one_recompile():
            yield self

    @contextmanager
    def _merge_checks(self) -> Iterator[None]:
        from executorch.exir.backend.canonical_partitioners.group_partitioner import (
            GroupBasedPartitioner,
        )

        from lowerd.lowering.merge_checks import MergeChecks, graph_structure

        owner = GroupBasedPartitioner
        raw = {name: owner.__dict__[name] for name in _MERGE_NAMES}
        viewed: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        merging: list[MergeChecks] = []  # the merge running (one per partitioner call)

        def init(partitioner: Any, graph_module: Any, *args: Any, **kwargs: Any) -> None:
            raw["__init__"](partitioner, graph_module, *args, **kwargs)
            viewed[partitioner] = graph_structure(graph_module.graph)  # the viewer's graph

        def merge(partitioner: Any, partitions_by_id: Any, *args: Any, **kwargs: Any) -> None:
            checks = MergeChecks(partitioner, partitions_by_id, viewed.get(partitioner))
            merging.append(checks)
            try:
                raw["_merge_partitions"](partitioner, partitions_by_id, *args, **kwargs)
            finally:
                merging.pop()

        def can_merge(partitioner: Any, p1: Any, p2: Any, partitions_by_id: Any) -> bool:
            self.merge_checks += 1
            if merging and merging[-1].serves(partitioner, partitions_by_id):
                return merging[-1].can_merge(p1, p2)
            return _can_merge_partitions(partitioner, p1, p2, partitions_by_id)

        # Swapped for this lowering only and restored below, as mock.patch would.
        owner.__init__ = init
        owner._merge_partitions = merge
        owner._can_merge_partitions = can_merge
        try:
            yield
        finally:
            for name, function in raw.items():
                setattr(owner, name, function)

    @contextmanager
    def _one_recompile(self) -> Iterator[None]:
        from executorch.exir import lowered_backend_module
        from executorch.exir.backend import backend_api

        from lowerd.lowering.graph_legalize import legalize_in_place, prioritized_ops

        raw_legalize = lowered_backend_module.legalize_graph
        raw_cut = backend_api._create_partitions_in_graph_module
        held: list[list[Any]] = []  # per cut running (a cut may nest in a submodule's)
        prioritized = prioritized_ops()

        def in_place(graph_module: Any) -> Any:
            if not legalize_in_place(graph_module, prioritized):
                return raw_legalize(graph_module)
            self.legalized_in_place += 1
            return graph_module

        def legalize_graph(graph_module: Any) -> Any:
            if not held:
                return raw_legalize(graph_module)
            self.recompiles_held += 1
            if not any(graph_module is seen for seen in held[-1]):
                held[-1].append(graph_module)
            return _without_recompile(graph_module, in_place)

        def create_partitions(graph_module: Any, *args: Any, **kwargs: Any) -> Any:
            held.append([])
            try:
                return raw_cut(graph_module, *args, **kwargs)
            finally:
                for module in held.pop():
                    module.recompile()

        lowered_backend_module.legalize_graph = legalize_graph
        backend_api._create_partitions_in_graph_module = create_partitions
        try:
            yield
        finally:
            lowered_backend_module.legalize_graph = raw_legalize
            backend_api._create_partitions_in_graph_module = raw_cut


def _can_merge_partitions(partitioner: Any, p1: Any, p2: Any, partitions_by_id: Any) -> bool:
    """GroupBasedPartitioner._can_merge_partitions of ExecuTorch 1.5.1, its downstream test
    asked of sets."""
    from torch.fx.passes.utils.fuser_utils import validate_partition

    p1_nodes = set(partitions_by_id[p1].nodes.keys())
    p2_nodes = set(partitions_by_id[p2].nodes.keys())
    combined_nodes = p1_nodes.union(p2_nodes)
    user_nodes = []
    for node in combined_nodes:
        for user in node.users:
            if user not in combined_nodes:
                user_nodes.append(user)
    for external_node in user_nodes:
        downstream_nodes = partitioner.dependency_viewer.downstreams_of(external_node)
        if not downstream_nodes.isdisjoint(combined_nodes):
            return False
    return bool(validate_partition(list(combined_nodes)))


def _without_recompile(graph_module: Any, legalize: Any) -> Any:
    """torch's legalize_graph on graph_module, its graph assigned without the recompile the
    GraphModule's setter makes (the caller recompiles once, later)."""
    graph_module.recompile = _no_recompile  # an instance attribute: the setter calls it
    try:
        return legalize(graph_module)
    finally:
        del graph_module.recompile


def _no_recompile() -> None:
    return None
