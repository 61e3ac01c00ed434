"""Exact shortcuts through XNNPACK's preprocess: its passes that would change nothing do not run.

`XnnpackBackend.preprocess` runs 17 graph passes over a partition (`XNNPACKPassManager.transform`)
before it serializes the graph, and all but two of them end by retracing the whole partition
through `ExportPass`: every node propagated again with FakeTensors, the module recompiled and
verified. On ResNet-18, whose single partition is the whole network, that is 30 to 80 ms a pass,
and 14 of the 17 passes give the graph back as they found it: an edit anywhere pays them all.

A pass is made of a rewrite, which touches only the nodes it looks for (its triggers), and that
retrace. When a graph holds no trigger, the rewrite does nothing and the pass is a plain retrace.
A plain retrace of a graph that is itself the output of a retrace gives the same graph back:
`ExportPass` rebuilds each node, in order, with the same target and arguments, copies its whole
`meta` and recomputes `val` and `tensor_meta` from the same fake inputs (so to equal values). What
differs is what no step of XNNPACK's serialization reads: node names (parameters are found
through the signature, renamed with them), the length of `from_node` chains, the generated code.
So such a pass is skipped, and the serialized blob is the same: tests/test_xnnpack_passes.py
compares the bytes with stock's.

A pass is skipped only when all of these hold, and runs otherwise:
- the pass manager runs XNNPACK's default pipeline, exactly as listed in these versions;
- the pass is one whose triggers are known here (`_TRIGGERS`), and the graph holds none of them;
- the graph came out of a retrace of this pipeline that nothing has changed since: the first
  retracing pass always runs, and a pass that may change the graph in place without retracing
  (clone removal, pad Q/DQ insertion) makes the next one run;
- the graph module carries no `args` of its own (ExportPass would retrace from those);
- torch and ExecuTorch are the versions this argument was checked against.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from lowerd.cache.store import BlobStore
from lowerd.lowering.edge_speedups import decode_plain, encode_plain, validated_versions

# The store's kind for the pattern graphs' call targets, by name (see _pattern_targets).
PATTERNS_MEMO_KIND = "xnnpatterns"
PATTERNS_FORMAT_VERSION = 1


@dataclass(frozen=True)
class PassRun:
    """One pass of XNNPACK's preprocess: skipped (it would have changed nothing) or run."""

    name: str
    skipped: bool
    seconds: float


@dataclass
class XnnpackPassSkips:
    # Where the pattern graphs' targets are kept between processes (None: built in each).
    store: BlobStore | None = None
    runs: list[PassRun] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return sum(1 for run in self.runs if run.skipped)

    @contextmanager
    def installed(self) -> Iterator[XnnpackPassSkips]:
        """Skip XNNPACK's passes that would change nothing until exit, then put the pass manager
        back as it was."""
        if not validated_versions():
            yield self
            return
        from executorch.backends.xnnpack import _passes

        manager = _passes.XNNPACKPassManager
        raw = manager.__dict__["transform"]
        triggers = _triggers(self.store)
        pipeline = _default_pipeline()
        record = self.runs.append

        def transform(pass_manager: Any) -> Any:
            if [p.__name__ for p in pass_manager.passes] != pipeline:
                return raw(pass_manager)
            return _transform_skipping(pass_manager, triggers, record)

        manager.transform = transform
        try:
            yield self
        finally:
            manager.transform = raw


def _transform_skipping(
    pass_manager: Any, triggers: dict[str, Callable[[Any, Any], bool]], record: Any
) -> Any:
    """XNNPACKPassManager.transform, without the passes that would give the graph back."""
    from executorch.backends.xnnpack._passes import XNNPACKPass
    from executorch.exir.program._program import _transform

    program = pass_manager.exported_program
    retraced = False  # the graph came out of a retrace of this pipeline, unchanged since
    for pass_class in pass_manager.passes:
        started = time.perf_counter()
        name = pass_class.__name__
        trigger = triggers.get(name)
        graph_module = program.graph_module
        if (
            retraced
            and trigger is not None
            and "args" not in graph_module.meta
            and not trigger(program, graph_module)
        ):
            record(PassRun(name, True, time.perf_counter() - started))
            continue
        if issubclass(pass_class, XNNPACKPass):
            result = _transform(program, pass_class(program))
        else:
            result = _transform(program, pass_class())
        if name in _RETRACING:
            retraced = True
        elif result is not program:  # changed in place, with no retrace after
            retraced = False
        program = result
        record(PassRun(name, False, time.perf_counter() - started))
    return program


# XNNPACK's default pipeline in these versions, by class name, in order.
_PIPELINE = (
    "XNNPACKRemoveCloneOpsTransform",
    "DimOrderOpsRevertPass",
    "ConvertToUpsampleBilinear2d",
    "ConvertToLinearPass",
    "PropagateCustomMetaPass",
    "ConvertToSDPAPass",
    "ConstPropPass",
    "FuseBatchNormPass",
    "DecomposeBatchNorm",
    "FuseActivationPass",
    "DecomposeConcatenate",
    "RemoveGetItemPass",
    "InsertPadQDQPass",
    "Conv1dUnsqueezePass",
    "PReLUReshapePass",
    "ChannelsLastTaggedReshapePass",
    "RemoveRedundantCopyPass",
)
# The passes whose `call` ends with a retrace of the whole graph, whatever they found (plain
# ExportPasses, and XNNPACKPasses whose call ends with `super().call`).
_RETRACING = frozenset(_PIPELINE) - {"XNNPACKRemoveCloneOpsTransform", "InsertPadQDQPass"}


def _default_pipeline() -> list[str]:
    """The pass manager's default list, which must be the one the triggers were read from."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager

    names = [p.__name__ for p in XNNPACKPassManager(None).passes]
    return names if tuple(names) == _PIPELINE else []


def _triggers(store: BlobStore | None = None) -> dict[str, Callable[[Any, Any], bool]]:
    """For each pass whose rewrite is understood: does this graph hold a node it would touch?
    Each predicate errs towards True (run the pass)."""
    from executorch.backends.xnnpack._passes.convert_to_linear import ConvertToLinearPass
    from executorch.backends.xnnpack._passes.decompose_batch_norm import DecomposeBatchNorm
    from executorch.backends.xnnpack._passes.fuse_activation_pass import FuseActivationPass
    from executorch.backends.xnnpack.utils.quant_utils import is_dequant, is_quant
    from executorch.exir.dialects.edge._ops import EdgeOpOverload
    from executorch.exir.passes.dim_order_ops_registry import MemoryFormatOpsMap

    def named(*names: str) -> Callable[[Any, Any], bool]:
        wanted = frozenset(names)
        return lambda _program, gm: any(_name(n) in wanted for n in _calls(gm))

    batch_norms = {_name_of(op) for op in DecomposeBatchNorm.BATCH_NORM_OPS}
    return {
        "DimOrderOpsRevertPass": lambda _p, gm: any(
            isinstance(n.target, EdgeOpOverload) and n.target in MemoryFormatOpsMap
            for n in _calls(gm)
        ),
        "ConvertToUpsampleBilinear2d": _pattern_trigger("bilinear_2d", _bilinear_patterns, store),
        # [add]mm in a linear's source partition, and the fallback: addmm/mm, and the view_copy
        # around a linear.
        "ConvertToLinearPass": named(
            *(_name_of(op) for op in ConvertToLinearPass.targets),
            "aten.mm.default",
            "aten.addmm.default",
            "aten.linear.default",
        ),
        "PropagateCustomMetaPass": lambda _p, gm: any(
            is_quant(n) or is_dequant(n) for n in _calls(gm)
        ),
        "ConvertToSDPAPass": _pattern_trigger("sdpa", _sdpa_patterns, store),
        "ConstPropPass": _const_prop_trigger,
        "FuseBatchNormPass": named(*batch_norms),
        "DecomposeBatchNorm": named(*batch_norms),
        "FuseActivationPass": named(
            *(_name_of(op) for op in FuseActivationPass.FUSEABLE_ACTIVATIONS)
        ),
        "DecomposeConcatenate": named("aten.cat.default"),
        "RemoveGetItemPass": named("aten.max_pool2d_with_indices.default", "aten.max.dim"),
        "Conv1dUnsqueezePass": _conv1d_trigger,
        "PReLUReshapePass": named("aten._prelu_kernel.default"),
        "RemoveRedundantCopyPass": named("aten._to_copy.default"),
    }


def _calls(graph_module: Any) -> Iterator[Any]:
    return (n for n in graph_module.graph.nodes if n.op == "call_function")


def _name_of(target: Any) -> str:
    """The name "aten.mm.default", for the edge op and the ATen op alike (whose __name__ drops
    the namespace)."""
    import torch

    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return str(getattr(target, "__name__", target))


def _name(node: Any) -> str:
    return _name_of(node.target)


def _bilinear_patterns() -> list[Any]:
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d

    return list(bilinear_2d.get_graphs_dict())


def _sdpa_patterns() -> list[Any]:
    from executorch.backends.xnnpack.partition.graphs import sdpa

    return list(sdpa.get_graphs())


def _pattern_trigger(
    kind: str, patterns: Callable[[], list[Any]], store: BlobStore | None
) -> Callable[[Any, Any], bool]:
    """A SubgraphMatcher match maps each call_function node of a pattern to a graph node with the
    same target: a pattern one of whose targets the graph lacks cannot match. Targets are
    compared by name ("aten.bmm.default", the edge op and the ATen op alike): two targets of one
    name only make the pass run more often."""

    wanted: list[frozenset[str]] = []  # each pattern's targets, read at the first partition

    def trigger(_program: Any, graph_module: Any) -> bool:
        if not wanted:
            wanted.extend(_pattern_targets(kind, patterns, store))
        present = {_name(n) for n in _calls(graph_module)}
        return any(targets <= present for targets in wanted)

    return trigger


def _pattern_targets(
    kind: str, patterns: Callable[[], list[Any]], store: BlobStore | None
) -> list[frozenset[str]]:
    """Each pattern's call targets by name. XNNPACK makes its pattern graphs by exporting small
    modules (bilinear upsampling and SDPA: about 4 s of CPU, once per process, in each build's
    first preprocess); their targets are a function of the torch and ExecuTorch code alone, so
    they are kept in this machine's store (never a team cache's: nothing but the versions
    checks them), keyed by those versions, as lists of names."""
    key = _patterns_key(kind)
    stored = store.get_here(key, PATTERNS_MEMO_KIND) if store is not None else None
    kept = decode_plain(stored) if stored is not None else None
    if _names_lists(kept):
        return [frozenset(targets) for targets in kept]
    names = [
        sorted({_name(n) for n in getattr(p, "graph", p).nodes if n.op == "call_function"})
        for p in patterns()
    ]
    payload = encode_plain(names)
    if store is not None and payload is not None:
        store.put_here(key, payload, PATTERNS_MEMO_KIND)
    return [frozenset(targets) for targets in names]


def _patterns_key(kind: str) -> str:
    import hashlib
    from importlib.metadata import version

    import torch

    identity = f"{PATTERNS_FORMAT_VERSION}:{kind}:{torch.__version__}:{version('executorch')}"
    return hashlib.sha256(identity.encode()).hexdigest()


def _names_lists(value: Any) -> TypeGuard[list[list[str]]]:
    return isinstance(value, list) and all(
        isinstance(names, list) and all(isinstance(n, str) for n in names) for names in value
    )


def _const_prop_trigger(_program: Any, graph_module: Any) -> bool:
    """ConstPropPass folds a call whose inputs are all real tensors or plain values. In a retrace
    inputs are FakeTensors, but for get_attr nodes, placeholders whose fake value carries a
    `constant`, and the results of calls folded before: a call whose tensor inputs are all of
    those (or which has none) would be folded."""
    constant: set[Any] = set()
    for node in graph_module.graph.nodes:
        if node.op == "get_attr":
            constant.add(node)
        elif node.op == "placeholder":
            if getattr(node.meta.get("val"), "constant", None) is not None:
                constant.add(node)
        elif node.op == "call_function":
            if all(arg in constant for arg in node.all_input_nodes):
                if node.target is not operator.getitem:
                    return True
                constant.add(node)
    return False


def _conv1d_trigger(program: Any, graph_module: Any) -> bool:
    """As Conv1dUnsqueezePass looks: a convolution whose kernel (behind a dequantize of a
    non-quantize) has rank 3."""
    from executorch.backends.transforms import get_shape
    from executorch.backends.xnnpack.utils.quant_utils import is_dequant, is_quant

    for node in _calls(graph_module):
        if _name(node) != "aten.convolution.default":
            continue
        try:
            kernel = node.args[1]
            if is_dequant(kernel) and not is_quant(kernel.args[0]):
                kernel = kernel.args[0]
            if len(get_shape(kernel)) == 3:
                return True
        except Exception:  # a kernel it could not read: let the pass decide
            return True
    return False
