"""The delegation report of one lowered method: what runs on which backend, what stays, and why.

Counted two ways. `delegated_nodes`, `non_delegated_nodes` and `subgraphs` are counted as
ExecuTorch's own get_delegation_info counts them, so they agree with its tool (tests/test_report.py
compares the two); not by calling it, as its module imports pandas, and with it the whole of
executorch.devtools: ~0.9 CPU s in every process that builds. `ops`, `ops_delegated` and
`coverage` leave out bookkeeping nodes (getitem, symbolic sizes, asserts) that
get_delegation_info counts as non-delegated although no backend could ever take them.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable
from functools import partial
from typing import Any

import torch
from executorch.exir.lowered_backend_module import LoweredBackendModule

from lowerd.lowering.module_coverage import (
    ModuleStack,
    module_coverage,
    module_of,
    module_stack,
    qualified_class,
)
from lowerd.lowering.op_graph import lowered_module, op_graph
from lowerd.lowering.partition_graph import PartitionGraph
from lowerd.lowering.preprocess_cache import PreprocessCache
from lowerd.lowering.reasons import PartitionReasons
from lowerd.lowering.refusals import output_elements, refusal_groups
from lowerd.project.backends import backend_by_details_class
from lowerd.project.report_model import MethodReport, NotDelegatedOp, PartitionSummary
from lowerd.project.source_map import UserFiles

_BOOKKEEPING_OPS = ("sym_size", "sym_numel", "sym_stride", "sym_storage_offset", "_assert")

_ModuleOp = tuple[int, ModuleStack, bool]  # (debug handle, module stack, delegated)


# Higher-order ops that wrap the op the user called: torch.export functionalizes a custom op that
# mutates its inputs (ExecuTorch's llama::update_cache) into auto_functionalized_v2(op, ...).
_WRAPPING_OPS = ("auto_functionalized", "auto_functionalized_v2")


def op_name(node: torch.fx.Node) -> str:
    """`aten.cumsum.default`, the name users see in ExecuTorch's docs and error messages; for a
    functionalized mutating op, the op it wraps (`llama.update_cache.default`)."""
    target: Any = node.target
    if getattr(target, "__name__", None) in _WRAPPING_OPS and node.args:
        target = node.args[0]
    schema = getattr(target, "_schema", None)
    if schema is not None:
        namespace, _, name = schema.name.partition("::")
        overload = schema.overload_name or "default"
        return f"{namespace}.{name}.{overload}"
    return getattr(target, "__name__", str(target))


def is_bookkeeping(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return True
    if node.target is operator.getitem or getattr(node.target, "__module__", "") == "_operator":
        return True  # tuple unpacking, and Python arithmetic on symbolic sizes
    name = op_name(node)
    return name.startswith("executorch_call_delegate") or any(
        part in name for part in _BOOKKEEPING_OPS
    )


def _delegation_counts(graph_module: torch.fx.GraphModule) -> tuple[int, int, int]:
    """(delegated nodes, non-delegated nodes, delegated subgraphs) as get_delegation_info counts
    them: every call_function node of the method outside the delegate calls, by node name as it
    goes, and of each `lowered_module_*` attribute's original graph."""
    delegated = non_delegated = subgraphs = 0
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and _op_type(node.name) != "executorch_call_delegate":
            non_delegated += 1
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            subgraphs += 1
            original = getattr(graph_module, node.name).original_module.graph.nodes
            delegated += sum(1 for inner in original if inner.op == "call_function")
    return delegated, non_delegated, subgraphs


def _op_type(node_name: str) -> str:
    return re.sub(r"_[\d]+$", "", node_name)


def method_report(
    graph_module: torch.fx.GraphModule,
    user_files: UserFiles,
    reasons: PartitionReasons,
    preprocess: PreprocessCache | None,
    backend_names: list[str],
) -> MethodReport:
    """The report of a lowered method, counted on ExecuTorch's lowered graph."""
    delegated, non_delegated, subgraphs = _delegation_counts(graph_module)
    report = MethodReport(
        delegated_nodes=delegated,
        non_delegated_nodes=non_delegated,
        subgraphs=subgraphs,
        ops=0,
        ops_delegated=0,
        coverage=0.0,
    )
    modules: list[_ModuleOp] = []
    for node in graph_module.graph.nodes:
        lowered = lowered_module(graph_module, node)
        if lowered is not None:
            record = preprocess.outcome_of_blob(lowered.processed_bytes) if preprocess else None
            nodes = lowered.original_module.graph.nodes
            display = _display(lowered.backend_id)
            outcome = record.outcome if record is not None else None
            _add_partition(report, display, nodes, outcome, user_files, modules)
            report.partitions[-1].blob_bytes = len(lowered.processed_bytes)
            report.partitions[-1].data_bytes = _named_data_bytes(lowered)
        elif not is_bookkeeping(node):
            report.not_delegated.append(_not_delegated(node, user_files, reasons, backend_names))
            modules.append(_module_op(node, delegated=False))

    graph = PartitionGraph(graph_module.graph, partial(_delegate_call, graph_module))
    labels = [f"{p.backend} partition {i} ({p.ops} ops)" for i, p in enumerate(report.partitions)]
    report.graph = op_graph(graph_module, labels)
    return _finished(report, graph, modules)


def _named_data_bytes(lowered: LoweredBackendModule) -> int:
    """The bytes of the named data the backend stored beside its blob (XNNPACK's weights)."""
    named = lowered.named_data_store_output
    return sum(len(buffer) for buffer in named.buffers) if named is not None else 0


def partitioned_report(
    graph_module: torch.fx.GraphModule,
    backend: str,
    user_files: UserFiles,
    reasons: PartitionReasons,
    backend_names: list[str],
) -> MethodReport:
    """The report as soon as the last partitioner tagged the method, before any preprocess."""
    report = MethodReport(0, 0, 0, ops=0, ops_delegated=0, coverage=0.0, final=False)
    tagged: dict[str, list[torch.fx.Node]] = {}
    modules: list[_ModuleOp] = []
    for node in graph_module.graph.nodes:
        lowered = lowered_module(graph_module, node)
        if lowered is not None:  # taken by an earlier partitioner
            nodes = lowered.original_module.graph.nodes
            display = _display(lowered.backend_id)
            _add_partition(report, display, nodes, None, user_files, modules)
        elif (tag := _tag(node)) is not None:
            tagged.setdefault(tag, []).append(node)
        elif not is_bookkeeping(node):
            report.not_delegated.append(_not_delegated(node, user_files, reasons, backend_names))
            modules.append(_module_op(node, delegated=False))
    for nodes in tagged.values():
        _add_partition(report, backend, nodes, None, user_files, modules)
    report.subgraphs = len(report.partitions)

    def partition_of(node: torch.fx.Node) -> tuple[str, str] | None:
        tag = _tag(node)
        return (tag, backend) if tag is not None else _delegate_call(graph_module, node)

    return _finished(report, PartitionGraph(graph_module.graph, partition_of), modules)


def _tag(node: torch.fx.Node) -> str | None:
    return node.meta.get("delegation_tag") if node.op == "call_function" else None


def _delegate_call(
    graph_module: torch.fx.GraphModule, node: torch.fx.Node
) -> tuple[str, str] | None:
    """(partition id, backend) of an executorch_call_delegate node: a partition of the graph."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    lowered = lowered_module(graph_module, node.args[0])
    return (node.args[0].name, _display(lowered.backend_id)) if lowered is not None else None


def lowered_modules(graph_module: torch.fx.GraphModule) -> list[LoweredBackendModule]:
    """The method's delegates in the order method_report lists its partitions."""
    found = (lowered_module(graph_module, node) for node in graph_module.graph.nodes)
    return [lowered for lowered in found if lowered is not None]


def _display(backend_id: str) -> str:
    backend = backend_by_details_class(backend_id)
    return backend.display if backend else backend_id


def _add_partition(
    report: MethodReport,
    backend: str,
    nodes: Iterable[torch.fx.Node],
    cache: str | None,
    user_files: UserFiles,
    modules: list[_ModuleOp],
) -> None:
    ops = [node for node in nodes if not is_bookkeeping(node)]
    sources = []
    for node in ops:
        modules.append(_module_op(node, delegated=True))
        source = user_files.innermost_in_stack_trace(node.meta.get("stack_trace"))
        if source:
            sources.append([user_files.display(source.file), source.line, op_name(node)])
    report.partitions.append(PartitionSummary(backend, len(ops), cache, sources))
    totals = report.backends.setdefault(backend, {"ops": 0, "partitions": 0})
    totals["ops"] += len(ops)
    totals["partitions"] += 1
    report.ops_delegated += len(ops)


def _finished(
    report: MethodReport, graph: PartitionGraph, modules: list[_ModuleOp]
) -> MethodReport:
    report.ops = report.ops_delegated + len(report.not_delegated)
    report.coverage = round(report.ops_delegated / report.ops, 4) if report.ops else 0.0
    report.refusals, report.partitions_if_fixed = refusal_groups(report.not_delegated, graph)
    # In graph order (debug handles number the nodes as exported, inside partitions too), so the
    # module tree lists siblings as the model runs them, in both reports.
    modules.sort(key=lambda op: op[0])
    report.modules = module_coverage((stack, delegated) for _, stack, delegated in modules)
    return report


def _module_op(node: torch.fx.Node, delegated: bool) -> _ModuleOp:
    handle = node.meta.get("debug_handle")
    return (handle if isinstance(handle, int) else 0, module_stack(node.meta), delegated)


def _not_delegated(
    node: torch.fx.Node, user_files: UserFiles, reasons: PartitionReasons, backend_names: list[str]
) -> NotDelegatedOp:
    name = op_name(node)
    stack_trace = node.meta.get("stack_trace")
    source = user_files.innermost_in_stack_trace(stack_trace)
    library = user_files.innermost_library_frame(stack_trace)
    module_type = qualified_class(node.meta)
    if library is None and source is None and module_type:
        # Only generated code in the trace (a region export inlined): the module's forward.
        library = user_files.library_forward(module_type)
    module_path, module_class = module_of(node.meta)
    return NotDelegatedOp(
        op=name,
        file=user_files.display(source.file) if source else None,
        line=source.line if source else None,
        reason=reasons.reason_for(node, name, backend_names),
        node=node.name,
        library=library,
        module_path=module_path,
        module_class=module_class,
        elements=output_elements(node.meta.get("val")),
    )
