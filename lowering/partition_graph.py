"""A method's graph seen as delegated partitions and the ops left on the CPU between them, to
tell what delegating some of those ops would do to the partition count.

Each partition is one vertex (a call_delegate node in the lowered graph, one delegation tag in
the partitioned one); each CPU op is one; getitems belong to what they unpack. Delegating ops
is modelled as a partitioner merges: a delegated op joins an adjacent partition, and two
adjacent delegated groups become one, unless the merge would make a cycle (a path from one to
the other through something left on the CPU: the merged partition would need its own output
before it runs). The merges are greedy, as ExecuTorch's capability-based partitioner does.

Counts are relative to the merges possible with nothing more delegated (the baseline), so that
what the model cannot know about a backend's own grouping does not count as a fix's effect.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

# node -> (partition id, backend) when the node is in a delegated partition
PartitionOf = Callable[[torch.fx.Node], tuple[str, str] | None]


class PartitionGraph:
    """Vertices: partitions and CPU ops; edges: data flow between them, by node name."""

    def __init__(self, graph: torch.fx.Graph, partition_of: PartitionOf):
        self.unit_of: dict[str, str] = {}  # node name -> vertex
        self.backend: dict[str, str] = {}  # partition vertex -> backend
        self.succ: dict[str, set[str]] = {}
        for node in graph.nodes:
            if node.op in ("placeholder", "get_attr", "output"):
                continue  # inputs, weights and the result constrain no merge
            unit = self._unit(node, partition_of)
            self.unit_of[node.name] = unit
            self.succ.setdefault(unit, set())
            for source in node.all_input_nodes:
                before = self.unit_of.get(source.name)
                if before is not None and before != unit:
                    self.succ[before].add(unit)
        self.pred: dict[str, set[str]] = {unit: set() for unit in self.succ}
        for unit, after in self.succ.items():
            for other in after:
                self.pred[other].add(unit)
        self._baseline = _Merges(self, frozenset())
        self._baseline.merge_all(self._edges_around(self.backend))

    def _unit(self, node: torch.fx.Node, partition_of: PartitionOf) -> str:
        partition = partition_of(node)
        if partition is not None:
            unit = f"partition:{partition[0]}"
            self.backend[unit] = partition[1]
            return unit
        if node.target is operator.getitem and node.args:
            source = node.args[0]
            if isinstance(source, torch.fx.Node) and source.name in self.unit_of:
                return self.unit_of[source.name]  # unpacking belongs to what it unpacks
        return node.name

    @property
    def partitions(self) -> int:
        return len(self.backend)

    def impact(self, fixed_nodes: Iterable[str]) -> Impact:
        """What delegating these CPU ops (by node name) would do to the partitions."""
        return self.impacts_cumulative([fixed_nodes])[0]

    def impacts_cumulative(self, fixes: Iterable[Iterable[str]]) -> list[Impact]:
        """The impact of delegating the first fix, then the first two, …: each step goes on
        from the merges of the one before."""
        merges = self._baseline.copy(frozenset())
        baseline = self._baseline.components_with_partitions()
        impacts = []
        for fixed_nodes in fixes:
            fixed = self._cpu_units(fixed_nodes) - merges.fixed
            merges.fixed |= fixed
            merges.merge_all(self._edges_around(fixed))
            merged = baseline - merges.components_with_partitions()
            left = self.partitions - merged + merges.components_of_fixed_only()
            impacts.append(Impact(merged, left))
        return impacts

    def _cpu_units(self, node_names: Iterable[str]) -> frozenset[str]:
        units = (self.unit_of.get(name) for name in node_names)
        return frozenset(u for u in units if u is not None and u not in self.backend)

    def _edges_around(self, around: Iterable[str]) -> list[tuple[str, str]]:
        """Every edge at these vertices; merge_all skips those to ops left on the CPU."""
        return [(unit, other) for unit in around for other in self.succ[unit] | self.pred[unit]]


@dataclass
class Impact:
    merged: int  # partitions that would merge into others: the boundaries the ops cause
    partitions_left: int  # partitions after delegating them (counting ones they would form)


@dataclass
class _Merges:
    """Union-find over the vertices, merging only delegated ones (partitions and `fixed`)."""

    graph: PartitionGraph
    fixed: frozenset[str]
    parent: dict[str, str] = field(default_factory=dict)
    members: dict[str, list[str]] = field(default_factory=dict)
    backend: dict[str, str] = field(default_factory=dict)  # root -> backend of its partitions

    def copy(self, fixed: frozenset[str]) -> _Merges:
        return _Merges(
            self.graph,
            self.fixed | fixed,
            dict(self.parent),
            {root: list(members) for root, members in self.members.items()},
            dict(self.backend),
        )

    def delegated(self, unit: str) -> bool:
        return unit in self.graph.backend or unit in self.fixed

    def find(self, unit: str) -> str:
        root = unit
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while unit != root:  # path halving keeps later finds short
            self.parent[unit], unit = root, self.parent[unit]
        return root

    def _members(self, root: str) -> list[str]:
        return self.members.get(root, [root])

    def _backend(self, root: str) -> str | None:
        return self.backend.get(root, self.graph.backend.get(root))

    def merge_all(self, edges: list[tuple[str, str]]) -> None:
        """Merge along the edges, and along every edge a merge brings next to the merged
        group, until no merge is left possible."""
        pending = list(edges)
        while pending:
            a, b = pending.pop()
            if not (self.delegated(a) and self.delegated(b)) or not self._merge(a, b):
                continue
            for unit in self._members(self.find(a)):
                neighbours = self.graph.succ[unit] | self.graph.pred[unit]
                pending.extend((unit, other) for other in neighbours if self.delegated(other))

    def _merge(self, a: str, b: str) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        backends = {self._backend(ra), self._backend(rb)} - {None}
        if len(backends) > 1:
            return False  # one backend's partition cannot take another's ops
        if self._path_outside(ra, rb) or self._path_outside(rb, ra):
            return False
        self.parent[rb] = ra
        self.members[ra] = self._members(ra) + self._members(rb)
        self.members.pop(rb, None)
        if backends:
            self.backend[ra] = backends.pop()
        return True

    def _path_outside(self, source: str, target: str) -> bool:
        """Whether `source` reaches `target` through a vertex of neither: merging them would
        then make a cycle. Merged groups are walked as one vertex, as they will run."""
        stack = [
            other
            for unit in self._members(source)
            for other in self.graph.succ[unit]
            if self.find(other) not in (source, target)
        ]
        seen: set[str] = set()
        while stack:
            root = self.find(stack.pop())
            if root == target:
                return True
            if root == source or root in seen:
                continue
            seen.add(root)
            for unit in self._members(root):
                stack.extend(self.graph.succ[unit])
        return False

    def components_with_partitions(self) -> int:
        return len({self.find(unit) for unit in self.graph.backend})

    def components_of_fixed_only(self) -> int:
        """Groups of delegated ops that joined no partition: new partitions of their own."""
        with_partitions = {self.find(unit) for unit in self.graph.backend}
        return len({self.find(unit) for unit in self.fixed} - with_partitions)
