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

import heapq
import itertools
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
        # Merges found to make a cycle, by (root, stamp) of both sides. A merge elsewhere cannot
        # unblock one (it removes no path), and a group's stamp changes whenever it grows, so a
        # pair blocked in the baseline stays blocked in every trial made from it: each trial
        # (one per refusal group) skips the walks the ones before it made.
        self.blocked: set[tuple[str, int, str, int]] = set()
        self.stamps = itertools.count(1)
        self._baseline = _Merges(self, frozenset(), label=self._topological_labels())
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

    def _topological_labels(self) -> dict[str, int]:
        """A position per vertex such that every edge goes up (Kahn's algorithm, graph order
        among the ready ones): the merges keep it true, and it bounds their cycle checks."""
        in_graph_order = {unit: index for index, unit in enumerate(self.succ)}
        waiting = {unit: len(before) for unit, before in self.pred.items()}
        ready = [(in_graph_order[u], u) for u, count in waiting.items() if count == 0]
        heapq.heapify(ready)
        labels: dict[str, int] = {}
        while ready:
            _, unit = heapq.heappop(ready)
            labels[unit] = len(labels)
            for other in self.succ[unit]:
                waiting[other] -= 1
                if waiting[other] == 0:
                    heapq.heappush(ready, (in_graph_order[other], other))
        for unit in self.succ:  # none left for a DAG; a cycle would leave its vertices out
            labels.setdefault(unit, len(labels))
        return labels

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
    """Union-find over the vertices, merging only delegated ones (partitions and `fixed`).

    `label` numbers the groups in an order every edge goes up (a topological order of the
    merged graph), kept true across merges as Pearce and Kelly's dynamic topological sort does:
    a path between two groups can only pass through groups numbered between them, so a cycle
    check walks that stretch of the graph, not everything after it.
    """

    graph: PartitionGraph
    fixed: frozenset[str]
    parent: dict[str, str] = field(default_factory=dict)
    members: dict[str, list[str]] = field(default_factory=dict)
    backend: dict[str, str] = field(default_factory=dict)  # root -> backend of its partitions
    stamp: dict[str, int] = field(default_factory=dict)  # root -> its last growth, unique
    label: dict[str, int] = field(default_factory=dict)  # root -> its topological position

    def copy(self, fixed: frozenset[str]) -> _Merges:
        return _Merges(
            self.graph,
            self.fixed | fixed,
            dict(self.parent),
            {root: list(members) for root, members in self.members.items()},
            dict(self.backend),
            dict(self.stamp),
            dict(self.label),
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
            merged = self.find(a)
            neighbours = {
                self.find(other)
                for unit in self._members(merged)
                for other in (*self.graph.succ[unit], *self.graph.pred[unit])
                if self.delegated(other)
            }
            pending.extend((merged, other) for other in neighbours - {merged})

    def _merge(self, a: str, b: str) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        backends = {b for b in (self._backend(ra), self._backend(rb)) if b is not None}
        if len(backends) > 1:
            return False  # one backend's partition cannot take another's ops
        if self.label[ra] > self.label[rb]:
            ra, rb = rb, ra  # ra comes first: no path leads from rb back to it
        pair = (ra, self.stamp.get(ra, 0), rb, self.stamp.get(rb, 0))
        if pair in self.graph.blocked:
            return False
        after = self._reached_before(ra, rb)
        if after is None:  # a path from ra to rb through something else: a cycle
            self.graph.blocked.add(pair)
            return False
        self._relabel(ra, rb, after, self._reaching_after(rb, ra))
        self.stamp[ra] = next(self.graph.stamps)
        self.parent[rb] = ra
        self.members[ra] = self._members(ra) + self._members(rb)
        self.members.pop(rb, None)
        if backends:
            self.backend[ra] = backends.pop()
        return True

    def _reached_before(self, first: str, second: str) -> set[str] | None:
        """The groups `first` reaches that come before `second`; None when one of them leads
        on to `second` (merging the two would make a cycle through it)."""
        limit, found, stack = self.label[second], set(), [first]
        while stack:
            root = stack.pop()
            for unit in self._members(root):
                for other in map(self.find, self.graph.succ[unit]):
                    if other == second and root != first:
                        return None
                    if other in (first, second) or other in found or self.label[other] > limit:
                        continue
                    found.add(other)
                    stack.append(other)
        return found

    def _reaching_after(self, second: str, first: str) -> set[str]:
        """The groups that reach `second` and come after `first`."""
        limit, found, stack = self.label[first], set(), [second]
        while stack:
            root = stack.pop()
            for unit in self._members(root):
                for other in map(self.find, self.graph.pred[unit]):
                    if other in (first, second) or other in found or self.label[other] < limit:
                        continue
                    found.add(other)
                    stack.append(other)
        return found

    def _relabel(self, first: str, second: str, after: set[str], before: set[str]) -> None:
        """Positions for the merged group (which keeps `first`'s name): what reaches `second`
        moves before it and what `first` reaches after it, within the positions they held, so
        every edge still goes up (nothing between them is on both sides: that is a cycle)."""
        pool = sorted(self.label[r] for r in (*before, first, second, *after))
        ahead = sorted(before, key=self.label.__getitem__)
        behind = sorted(after, key=self.label.__getitem__)
        for root, position in zip(ahead, pool, strict=False):
            self.label[root] = position
        self.label[first] = pool[len(ahead)]
        for root, position in zip(behind, pool[len(pool) - len(behind) :], strict=True):
            self.label[root] = position

    def components_with_partitions(self) -> int:
        return len({self.find(unit) for unit in self.graph.backend})

    def components_of_fixed_only(self) -> int:
        """Groups of delegated ops that joined no partition: new partitions of their own."""
        with_partitions = {self.find(unit) for unit in self.graph.backend}
        return len({self.find(unit) for unit in self.fixed} - with_partitions)
