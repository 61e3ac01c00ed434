"""A lowered method's op graph as the report keeps it: what `lowerd report --html` draws.

Every op of the method (the delegated ones inside their partitions, and those left on the CPU)
in graph order, with the partition it runs in, and the data flow between ops. Inputs, weights
and bookkeeping nodes (getitem, symbolic sizes) are not drawn: an edge passes through them.
Stored in the build record (so the CLI draws it without torch) in a compact form, CompactGraph.
A node's partition index is its row in MethodReport.partitions; -1 is the portable CPU, whose
nodes carry their node name (the key of NotDelegatedOp.node, for the source line). A graph of
more than MAX_NODES ops is collapsed: each partition becomes one node (its op name the partition's
label); if that still leaves too many, the nodes past MAX_NODES are dropped. `total_nodes` counts
the ops before either, so a view can say what it does not show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lowerd.project.wire import wire_form

# A drawing of more nodes is unreadable and its SVG megabytes: a real LLM has thousands of ops.
MAX_NODES = 1500
CPU = -1


@dataclass(frozen=True)
class GraphNode:
    op: str  # "aten.linear.default"; for a collapsed partition "XNNPACK partition 3 (120 ops)"
    partition: int  # its row in MethodReport.partitions; CPU (-1) for the portable kernels
    name: str | None = None  # the fx node's name, kept for CPU ops (NotDelegatedOp.node)

    @property
    def on_cpu(self) -> bool:
        return self.partition == CPU


@dataclass
class MethodGraph:
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)  # (from, to): node indexes
    total_nodes: int = 0  # ops in the method, before collapsing or capping
    collapsed: bool = False  # each partition drawn as one node
    omitted: int = 0  # ops dropped past MAX_NODES (after collapsing): drawn nowhere


@dataclass(frozen=True)
class CompactGraph:
    """A MethodGraph's wire form: each op name once (`ops`), a node as [OP INDEX, PARTITION] or,
    for a CPU node, [OP INDEX, PARTITION, NODE NAME]."""

    ops: list[str]
    nodes: list[list[int | str]]
    edges: list[tuple[int, int]]
    total_nodes: int
    collapsed: bool
    omitted: int


def compact(graph: MethodGraph) -> CompactGraph:
    ops: dict[str, int] = {}
    nodes: list[list[int | str]] = []
    for node in graph.nodes:
        index = ops.setdefault(node.op, len(ops))
        nodes.append([index, node.partition, node.name] if node.name else [index, node.partition])
    return CompactGraph(
        list(ops), nodes, list(graph.edges), graph.total_nodes, graph.collapsed, graph.omitted
    )


def expanded(form: CompactGraph) -> MethodGraph:
    """The graph of its wire form; ValueError for one whose indexes point nowhere (a damaged or
    forged record): the views index nodes and partitions by them."""
    for entry in form.nodes:
        if len(entry) not in (2, 3) or not 0 <= int(entry[0]) < len(form.ops):
            raise ValueError("expected [OP INDEX, PARTITION(, NAME)] with an index into ops")
        if int(entry[1]) < CPU:
            raise ValueError(f"expected a partition of {CPU} or more")
    if any(not (0 <= a < len(form.nodes) and 0 <= b < len(form.nodes)) for a, b in form.edges):
        raise ValueError("expected edges between nodes")
    nodes = [
        GraphNode(form.ops[int(entry[0])], int(entry[1]), _name(entry)) for entry in form.nodes
    ]
    return MethodGraph(nodes, list(form.edges), form.total_nodes, form.collapsed, form.omitted)


def _name(entry: list[int | str]) -> str | None:
    return str(entry[2]) if len(entry) > 2 else None


wire_form(MethodGraph, CompactGraph, compact, expanded)


def capped(graph: MethodGraph, partition_labels: Sequence[str]) -> MethodGraph:
    """The graph as stored: whole up to MAX_NODES ops; else each partition one node (labelled
    from `partition_labels`, one per partition); else its first MAX_NODES nodes."""
    if len(graph.nodes) <= MAX_NODES:
        return graph
    new_index: dict[int, int] = {}
    partition_node: dict[int, int] = {}
    nodes: list[GraphNode] = []
    for index, node in enumerate(graph.nodes):
        if node.on_cpu:
            new_index[index] = len(nodes)
            nodes.append(node)
        elif node.partition in partition_node:
            new_index[index] = partition_node[node.partition]
        else:
            label = (
                partition_labels[node.partition]
                if node.partition < len(partition_labels)
                else f"partition {node.partition}"
            )
            partition_node[node.partition] = new_index[index] = len(nodes)
            nodes.append(GraphNode(label, node.partition))
    kept = nodes[:MAX_NODES]
    dropped = nodes[MAX_NODES:]
    omitted = sum(1 for node in dropped if node.on_cpu) + sum(
        1 for node in graph.nodes if not node.on_cpu and partition_node[node.partition] >= MAX_NODES
    )
    edges = sorted(
        {
            (new_index[a], new_index[b])
            for a, b in graph.edges
            if new_index[a] != new_index[b] and max(new_index[a], new_index[b]) < len(kept)
        }
    )
    return MethodGraph(kept, edges, graph.total_nodes, True, omitted)
