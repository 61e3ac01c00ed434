"""Repeated layers preprocessed once: XNNPACK partitions that differ only in their weights share
one run of XNNPACK's passes.

An L-layer Llama cuts into a handful of partitions per layer (the attention projections with the
norm before them, the attention, the output projection, the MLP), and layer 2's partitions are
layer 1's up to the weights: same graph, same tensor shapes, other parameter values and other
parameter names ("model.layers.1.mlp.up_proj.weight"). XNNPACK's preprocess runs 17 passes over
each (most of its time: every retrace propagates the whole partition again), then serializes
the transformed graph to a flatbuffer and its constants to the named data store, keyed by the
sha256 of their bytes.

Where the weight values enter, in these versions:
- The passes. Those that read a weight's value are the batch-norm fusion and decomposition, the
  1-d convolution unsqueeze and the PReLU reshape (they compute new weights); ConstPropPass folds
  calls whose inputs are all real tensors, and in a retrace a parameter is a FakeTensor (a
  placeholder whose fake value carries a `constant` keeps its contents in the structure below).
  The others match and rewrite by op, argument and metadata, ask `is_param_node` (a question of
  the signature, not of the value) and retrace with fake tensors.
- The serialization: each constant is read through the signature (`get_param_tensor`), made
  contiguous, cast, permuted or quantized as its node says, hashed, and its digest written in the
  flatbuffer; the bytes go to the named data store (deduplicated by digest).
- Nowhere else: the flatbuffer holds no parameter names, and node names only key dictionaries.

So for a partition whose structure (the cache key with the weights' contents and names left out,
`structure_digest`) equals one preprocessed earlier in this build, the passes would give the
earlier partition's transformed graph, up to names and debug handles. Stock's preprocess then
runs as it is, with XNNPACK's pass manager answering that transformed graph, its weights bound to
this partition's (by their position in the signature): the serialization, hashes and named data
are stock's code on this partition's values. The debug handles the graph carries are the earlier
partition's; they are rebased onto this one's (lowering/rebase.py), as a cache hit's are.

A partition shares only when all of these hold, and is preprocessed in full otherwise:
- torch and ExecuTorch are the versions this argument was checked against;
- it is a single XNNPACK program keyed with stable naming;
- each call in it (before and after the passes) is one of `_PROVEN_OPS` (float elementwise,
  shape, matmul and softmax ops: no convolution, batch norm, PReLU or quantization);
- its weights are float32 tensors;
- the partition it shares with ran XNNPACK's pass manager once, which read each weight it kept
  where it was given (the same tensor, under the same name) and added none.
tests/test_shared_passes.py compares every blob and the .pte with stock's.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from executorch.exir.backend.backend_details import PreprocessResult
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from lowerd.lowering.edge_speedups import validated_versions
from lowerd.lowering.partition_key import PartitionKey
from lowerd.lowering.rebase import CannotRebase, rebase

BACKEND = "XnnpackBackend"
_WEIGHT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
# The calls a sharing partition may hold, by edge op name, before and after XNNPACK's passes: none
# has a pass that reads a weight's value, and each serializes its constants through
# get_serialized_buffer_index alone.
_PROVEN_OPS = frozenset(
    {
        "aten.add.Tensor",
        "aten.sub.Tensor",
        "aten.mul.Tensor",
        "aten.div.Tensor",
        "aten.neg.default",
        "aten.pow.Tensor_Scalar",
        "aten.rsqrt.default",
        "aten.sqrt.default",
        "aten.mean.dim",
        "aten.sigmoid.default",
        "aten.cos.default",
        "aten.sin.default",
        "aten.relu.default",
        "aten.gelu.default",
        "aten.tanh.default",
        "aten._softmax.default",
        "aten.mm.default",
        "aten.addmm.default",
        "aten.bmm.default",
        "aten.linear.default",
        "aten.view_copy.default",
        "aten.permute_copy.default",
        "aten.unsqueeze_copy.default",
        "aten.expand_copy.default",
        "aten.slice_copy.Tensor",
        "aten.cat.default",
        "aten.clone.default",
        "dim_order_ops._clone_dim_order.default",
        "aten._to_copy.default",
        "dim_order_ops._to_dim_order_copy.default",
    }
)


@dataclass(frozen=True)
class _Template:
    """The first partition of a structure: its program after XNNPACK's passes, the names its
    weights had (by position in its signature) and its debug handles."""

    program: ExportedProgram
    weight_names: tuple[str, ...]
    handles: tuple[int, ...]
    passes: tuple[str, ...]


@dataclass
class SharedPasses:
    """Within one build: the partitions preprocessed in full and those that shared their passes."""

    templates: dict[str, _Template] = field(default_factory=dict)
    full: int = 0
    shared: int = 0

    def preprocess(
        self,
        backend: str,
        key: PartitionKey,
        programs: list[Any],
        run: Callable[[], list[PreprocessResult]],
    ) -> tuple[list[PreprocessResult], bool]:
        """`run`'s results, and whether the passes were shared with an earlier partition."""
        structure = _shareable_structure(backend, key, programs)
        if structure is None:
            self.full += 1
            return run(), False
        [program] = programs
        template = self.templates.get(structure)
        if template is not None:
            served = self._shared(template, key, program, run)
            if served is not None:
                results, shared = served
                self.shared += shared
                self.full += not shared
                return results, shared
        self.full += 1
        names = _weight_names(program)
        weights = {name: _weight(program, name) for name in names}
        with _captured() as runs:
            results = run()
        if template is None and len(runs) == 1:
            passes, transformed = runs[0]
            if _kept_weights(transformed, weights):
                self.templates[structure] = _Template(transformed, names, key.handles, passes)
        return results, False

    def _shared(
        self,
        template: _Template,
        key: PartitionKey,
        program: ExportedProgram,
        run: Callable[[], list[PreprocessResult]],
    ) -> tuple[list[PreprocessResult], bool] | None:
        """Stock's preprocess with the template's passes answered, rebased onto this partition's
        handles (and True); or, if its pass manager ran another pipeline, its own full results
        (and False); None if the answered results cannot be rebased (nothing of this partition
        was changed: it is preprocessed afresh)."""
        bound = _bound(template, program)
        with _answered(template, bound) as answered:
            results = run()
        if answered != [True]:
            return results, False
        try:
            return rebase(BACKEND, results, template.handles, key.handles), True
        except CannotRebase:
            return None


def _shareable_structure(backend: str, key: PartitionKey, programs: list[Any]) -> str | None:
    if backend != BACKEND or len(programs) != 1 or key.details.naming != "stable":
        return None
    if not validated_versions():
        return None
    [program] = programs
    if not _proven(program.graph_module) or not _float_weights(program):
        return None
    return structure_digest(key, program)


def structure_digest(key: PartitionKey, program: ExportedProgram) -> str:
    """The partition key without what names or holds a plain weight: its contents and its name
    (in the signature and in the placeholders' `desc`). A weight whose fake value carries its
    constant keeps its contents, since ConstPropPass may fold it."""
    details = key.details
    names = _weight_names(program)
    plain = _plain_weights(program)
    positions = {name: ("weight", i) for i, name in enumerate(names)}
    [tensors] = details.tensors
    structure = dataclasses.replace(
        details,
        naming="structure",
        tensors=(
            tuple((None, digest[:3] if name in plain else digest) for name, digest in tensors),
        ),
        signature=_renamed(details.signature, positions),
        graph=tuple(tuple(_placeholder_unnamed(node) for node in g) for g in details.graph),
    )
    return structure.digest()


def _placeholder_unnamed(node: tuple[Any, ...]) -> tuple[Any, ...]:
    """A node's encoding, without a placeholder's `desc`: the AOT descriptor that names the
    parameter it came from (a partition's input may be a parameter used outside it too). No step
    of XNNPACK's preprocess or of ExecuTorch's passes reads `desc`."""
    if node[0] != "placeholder":
        return node
    *head, meta = node
    return (*head, tuple(entry for entry in meta if entry[0] != "desc"))


def _renamed(value: Any, positions: dict[str, Any]) -> Any:
    """An encoding with each weight name replaced by its position."""
    if isinstance(value, str):
        return positions.get(value, value)
    if isinstance(value, tuple):
        return tuple(_renamed(v, positions) for v in value)
    return value


def _weight_names(program: ExportedProgram) -> tuple[str, ...]:
    return tuple(
        spec.target
        for spec in program.graph_signature.input_specs
        if spec.kind in _WEIGHT_KINDS and spec.target is not None
    )


def _weight(program: ExportedProgram, name: str) -> Any:
    value = program.state_dict.get(name)
    return program.constants.get(name) if value is None else value


def _plain_weights(program: ExportedProgram) -> frozenset[str]:
    """Weights whose placeholders hold a plain fake tensor (no `constant` to fold)."""
    signature = program.graph_signature
    by_node = {spec.arg.name: spec.target for spec in signature.input_specs if spec.target}
    plain = set()
    for node in program.graph_module.graph.nodes:
        if node.op == "placeholder" and node.name in by_node:
            if getattr(node.meta.get("val"), "constant", None) is None:
                plain.add(by_node[node.name])
    return frozenset(plain)


def _float_weights(program: ExportedProgram) -> bool:
    return all(
        isinstance(value, torch.Tensor)
        and type(value) in (torch.Tensor, torch.nn.Parameter)
        and value.dtype == torch.float32
        for value in (_weight(program, name) for name in _weight_names(program))
    )


def _proven(graph_module: Any) -> bool:
    for node in graph_module.graph.nodes:
        if node.op in ("call_module", "get_attr"):
            return False
        if node.op == "call_function" and _op_name(node.target) not in _PROVEN_OPS:
            return False
    return True


def _op_name(target: Any) -> str:
    schema = getattr(target, "_schema", None)
    if schema is None:
        return str(target)
    overload = schema.overload_name or "default"
    return f"{schema.name.replace('::', '.')}.{overload}"


def _kept_weights(transformed: ExportedProgram, weights: dict[str, Any]) -> bool:
    """The passes read each weight where they were given it and made none: every weight of the
    transformed program is one of the partition's, the same tensor under the same name."""
    if not _proven(transformed.graph_module):
        return False
    return all(
        name in weights and _weight(transformed, name) is weights[name]
        for name in _weight_names(transformed)
    )


def _bound(template: _Template, program: ExportedProgram) -> ExportedProgram:
    """The template's transformed program holding this partition's weights: the i-th weight
    of its signature is this partition's i-th."""
    mine = dict(zip(template.weight_names, _weight_names(program), strict=True))
    bound = copy.copy(template.program)
    source = template.program
    bound._state_dict = {
        name: _weight(program, mine[name]) if name in mine else value
        for name, value in source.state_dict.items()
    }
    bound._constants = {
        name: _weight(program, mine[name]) if name in mine else value
        for name, value in source.constants.items()
    }
    return bound


@contextmanager
def _captured() -> Iterator[list[tuple[tuple[str, ...], ExportedProgram]]]:
    """Each run of XNNPACK's pass manager while inside: its passes and the program it gave."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager

    current = XNNPACKPassManager.__dict__["transform"]
    runs: list[tuple[tuple[str, ...], ExportedProgram]] = []

    def transform(manager: Any) -> Any:
        program = current(manager)
        runs.append((_pass_names(manager), program))
        return program

    XNNPACKPassManager.transform = transform
    try:
        yield runs
    finally:
        XNNPACKPassManager.transform = current


@contextmanager
def _answered(template: _Template, bound: ExportedProgram) -> Iterator[list[bool]]:
    """XNNPACK's pass manager answers `bound` instead of running, once, if its passes are the
    template's; the list says whether it did."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager

    current = XNNPACKPassManager.__dict__["transform"]
    answered: list[bool] = []

    def transform(manager: Any) -> Any:
        if answered or _pass_names(manager) != template.passes:
            answered.append(False)
            return current(manager)
        answered.append(True)
        return bound

    XNNPACKPassManager.transform = transform
    try:
        yield answered
    finally:
        XNNPACKPassManager.transform = current


def _pass_names(manager: Any) -> tuple[str, ...]:
    return tuple(p.__name__ for p in manager.passes)
