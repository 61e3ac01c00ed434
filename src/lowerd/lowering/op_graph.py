"""A lowered method's op graph for the report (project/method_graph.py): every op, delegated or
not, with its partition, and the data flow between ops.

The lowered graph holds a partition as one executorch_call_delegate node; its ops are in the
lowered module's original program. They are stitched back in: the call's arguments feed the
original program's user inputs (in order), and `getitem(call, i)` is its i-th output. Inputs,
weights and bookkeeping nodes are not drawn; an edge passes through them to the ops they feed.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule

from lowerd.project.method_graph import CPU, GraphNode, MethodGraph, capped

# The ops that produce a value: several for a bookkeeping node that merely passes its inputs on.
_Producers = dict[str, list[int]]


def op_graph(graph_module: torch.fx.GraphModule, partition_labels: Sequence[str]) -> MethodGraph:
    """The method's graph; `partition_labels` (one per partition, in the report's order) name a
    partition drawn as one node when the graph is too big to draw op by op."""
    builder = _Builder()
    # get_attr node name -> (partition index, its lowered module)
    partitions: dict[str, tuple[int, LoweredBackendModule]] = {}
    for node in graph_module.graph.nodes:
        lowered = lowered_module(graph_module, node)
        if lowered is not None:  # in graph order, as the report lists the partitions
            partitions[node.name] = (len(partitions), lowered)
            continue
        call = _delegate_call(node, partitions)
        if call is not None:
            builder.delegate(node, *call)
        else:
            builder.node(node, CPU)
    graph = MethodGraph(builder.nodes, sorted(builder.edges), len(builder.nodes))
    return capped(graph, partition_labels)


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []
        self.edges: set[tuple[int, int]] = set()
        self.producers: _Producers = {}
        # delegate call node name -> the producers of each of its outputs
        self.outputs: dict[str, list[list[int]]] = {}

    def node(self, node: torch.fx.Node, partition: int, scope: _Producers | None = None) -> None:
        """Add an op of the top-level graph (CPU) or of a partition's program (`scope`)."""
        from lowerd.lowering.report import is_bookkeeping, op_name

        producers = self.producers if scope is None else scope
        if node.op in ("placeholder", "get_attr", "output"):
            producers.setdefault(node.name, [])
            return
        feeding = sorted(
            {p for source in node.all_input_nodes for p in producers.get(source.name, [])}
        )
        if scope is None and node.target is operator.getitem and node.args:
            source, index = node.args[0], node.args[1]
            outputs = self.outputs.get(getattr(source, "name", ""))
            if outputs is not None and isinstance(index, int):
                producers[node.name] = outputs[index] if index < len(outputs) else feeding
                return
        if is_bookkeeping(node):
            producers[node.name] = feeding  # an edge passes through it
            return
        index = len(self.nodes)
        name = node.name if partition == CPU else None
        self.nodes.append(GraphNode(op_name(node), partition, name))
        self.edges.update((source, index) for source in feeding)
        producers[node.name] = [index]

    def delegate(
        self,
        call: torch.fx.Node,
        lowered: LoweredBackendModule,
        partition: int,
        args: Sequence[object],
    ) -> None:
        """The partition's ops, fed by the call's arguments, and its outputs."""
        program = lowered.original_module
        user_inputs = list(program.graph_signature.user_inputs)
        scope: _Producers = {}
        for name, arg in zip(user_inputs, args, strict=False):
            if isinstance(arg, torch.fx.Node):
                scope[str(name)] = list(self.producers.get(arg.name, []))
        output: torch.fx.Node | None = None
        for node in program.graph_module.graph.nodes:
            if node.op == "placeholder" and node.name in scope:
                continue
            if node.op == "output":
                output = node
            self.node(node, partition, scope)
        results = output.args[0] if output is not None and output.args else ()
        values = results if isinstance(results, list | tuple) else (results,)
        self.outputs[call.name] = [
            list(scope.get(value.name, [])) if isinstance(value, torch.fx.Node) else []
            for value in values
        ]
        self.producers[call.name] = sorted({p for out in self.outputs[call.name] for p in out})


def lowered_module(
    graph_module: torch.fx.GraphModule, node: torch.fx.Node
) -> LoweredBackendModule | None:
    """The delegate a get_attr node names, if it names one."""
    if node.op != "get_attr" or not isinstance(node.target, str):
        return None
    owner = getattr(graph_module, node.target, None)
    return owner if isinstance(owner, LoweredBackendModule) else None


def _delegate_call(
    node: torch.fx.Node, partitions: dict[str, tuple[int, LoweredBackendModule]]
) -> tuple[LoweredBackendModule, int, Sequence[object]] | None:
    """(lowered module, partition index, the arguments passed) of an executorch_call_delegate."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    found = partitions.get(node.args[0].name)
    return (found[1], found[0], node.args[1:]) if found is not None else None
