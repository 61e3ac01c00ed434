"""The cache key of one delegate partition: every input a backend's preprocess reads, named.

Modelled on torch/_inductor/codecache.py's FxGraphHashDetails: the key is a dataclass whose fields
are the inputs, so two keys that differ can say which input changed (`PartitionKeyDetails.diff`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from typing import Any

import msgpack
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

# Bump when the key's structure or the cached value's encoding changes.
FORMAT_VERSION = 1

# Node metadata that differs between runs or only records where a node came from. `from_node`
# holds id(graph); the rest are provenance that no backend serializes.
VOLATILE_META = frozenset({"from_node", "stack_trace", "nn_module_stack", "torch_fn", "seq_nr"})


class Unkeyable(Exception):
    """The partition holds a value with no stable encoding; it is lowered without the cache."""


@dataclass(frozen=True)
class PartitionKeyDetails:
    format_version: int
    backend: str
    torch_version: str
    executorch_version: str
    compile_specs: tuple
    graph: tuple
    submodules: tuple
    signature: tuple
    range_constraints: tuple
    tensors: tuple

    def digest(self) -> str:
        return hashlib.sha256(_pack(dataclasses.astuple(self))).hexdigest()

    def diff(self, other: PartitionKeyDetails) -> list[str]:
        """Names of the inputs that differ: the explanation of a cache miss."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]


def partition_key(backend: str, program: ExportedProgram, compile_specs: Sequence[Any]) -> str:
    return key_details(backend, [program], [compile_specs]).digest()


def key_details(
    backend: str,
    programs: Sequence[ExportedProgram],
    compile_specs: Sequence[Sequence[Any]],
) -> PartitionKeyDetails:
    """Key of one preprocess call; several programs when a backend preprocesses methods together."""
    return PartitionKeyDetails(
        format_version=FORMAT_VERSION,
        backend=backend,
        torch_version=torch.__version__,
        executorch_version=_executorch_version(),
        compile_specs=tuple(_encode_compile_specs(specs) for specs in compile_specs),
        graph=tuple(_encode_graph(p.graph_module.graph) for p in programs),
        submodules=tuple(_encode_submodules(p.graph_module) for p in programs),
        signature=tuple(_encode_signature(p) for p in programs),
        range_constraints=tuple(_encode_ranges(p) for p in programs),
        tensors=tuple(_tensor_digests(p) for p in programs),
    )


@cache
def _executorch_version() -> str:
    return version("executorch")


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _encode_compile_specs(specs: Iterable[Any]) -> tuple:
    return tuple((spec.key, bytes(spec.value)) for spec in specs)


def _encode_graph(graph: torch.fx.Graph) -> tuple:
    return tuple(_encode_node(node) for node in graph.nodes)


def _encode_node(node: torch.fx.Node) -> tuple:
    meta = tuple(
        (name, _encode_value(value))
        for name, value in sorted(node.meta.items())
        if name not in VOLATILE_META
    )
    return (
        node.op,
        node.name,
        _encode_value(node.target),
        _encode_value(node.args),
        _encode_value(node.kwargs),
        meta,
    )


def _encode_submodules(graph_module: torch.fx.GraphModule) -> tuple:
    """Control-flow branches (cond, map, scan, while) live in get_attr'd GraphModules."""
    encoded = []
    for node in graph_module.graph.nodes:
        if node.op != "get_attr":
            continue
        owner = getattr(graph_module, node.target, None)
        if isinstance(owner, torch.fx.GraphModule):
            encoded.append((node.target, _encode_graph(owner.graph), _encode_submodules(owner)))
    return tuple(encoded)


def _encode_signature(program: ExportedProgram) -> tuple:
    signature = program.graph_signature
    inputs = tuple(
        (spec.kind.name, _encode_value(spec.arg), spec.target, spec.persistent)
        for spec in signature.input_specs
    )
    outputs = tuple(
        (spec.kind.name, _encode_value(spec.arg), spec.target) for spec in signature.output_specs
    )
    return inputs, outputs


def _encode_ranges(program: ExportedProgram) -> tuple:
    return tuple(sorted((str(sym), str(r)) for sym, r in program.range_constraints.items()))


def _tensor_digests(program: ExportedProgram) -> tuple:
    """Content digests of the weights a partition lifted: parameters, buffers and constants."""
    digests = []
    for spec in program.graph_signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            value = program.state_dict.get(spec.target)
            if value is None:  # non-persistent buffers live with the constants
                value = program.constants.get(spec.target)
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            value = program.constants.get(spec.target)
        else:
            continue
        digests.append((spec.target, _tensor_digest(value)))
    return tuple(digests)


def _tensor_digest(value: Any) -> tuple:
    if not isinstance(value, torch.Tensor):
        raise Unkeyable(f"constant of type {type(value).__name__} has no content digest")
    tensor = value.detach()
    data = _tensor_bytes(tensor)
    return (
        str(tensor.dtype),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        hashlib.sha256(data).hexdigest(),
    )


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    # Hash the logical contents: a strided view and its contiguous copy hold the same weights.
    flat = tensor.contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy()) if flat.numel() else b""


def _encode_value(value: Any) -> Any:  # noqa: C901 - one flat dispatch over value kinds
    """A deterministic, msgpack-able encoding; raises Unkeyable rather than guess."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return value
    if isinstance(value, float):
        return ("float", value.hex())  # exact: 0.1 and 0.1000000001 must not collide
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_encode_value(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((_encode_value(k), _encode_value(v)) for k, v in value.items()))
    if isinstance(value, torch.fx.Node):
        return ("node", value.name)
    if isinstance(value, torch.Tensor):
        return _encode_tensor_meta(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", str(value))
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return ("torch", str(value))
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__qualname__, _encode_value(value.value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple(
            (f.name, _encode_value(getattr(value, f.name))) for f in dataclasses.fields(value)
        )
        return ("dataclass", type(value).__qualname__, fields)
    if isinstance(value, type):
        return ("type", f"{value.__module__}.{value.__qualname__}")
    return _encode_by_repr(value)


def _encode_tensor_meta(tensor: torch.Tensor) -> tuple:
    """A tensor in metadata (meta["val"], eager_input_vals) is keyed by what it describes."""
    from executorch.exir.tensor import dim_order_from_stride

    stride = tuple(_encode_value(s) for s in tensor.stride())
    try:
        dim_order = tuple(dim_order_from_stride(tensor.stride()))
    except Exception:  # symbolic or ambiguous strides: the strides themselves are keyed
        dim_order = None
    return (
        "tensor",
        str(tensor.dtype),
        tuple(_encode_value(s) for s in tensor.shape),
        stride,
        dim_order,
        tensor.requires_grad,
    )


def _encode_by_repr(value: Any) -> tuple:
    # Op overloads, EdgeOpOverloads, quantization specs and AOT descriptors print their identity.
    # An object that prints its address cannot be keyed across runs.
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        raise Unkeyable(f"{type(value).__qualname__} has no stable encoding: {text[:80]}")
    return ("repr", f"{type(value).__module__}.{type(value).__qualname__}", text)
