"""The cache key of one delegate partition: every input a backend's preprocess reads, named.

Modelled on torch/_inductor/codecache.py's FxGraphHashDetails: the key is a dataclass whose fields
are the inputs, so two keys that differ can say which input changed (`PartitionKeyDetails.diff`).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from typing import Any

import msgpack
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from lowerd.project.key_summary import DIGEST_CHARS, KeySummary

# A value as the key holds it: nested tuples of plain values, packed with msgpack.
Encoded = tuple[Any, ...]

# Bump when the key's structure or the cached value's encoding changes. 3: a partition is keyed
# on the ranges of its own graph's symbols (_encode_own_ranges), not its program's whole dict.
# 4: with stable naming, unbacked symbols are named by their order of first appearance.
FORMAT_VERSION = 4

# Node metadata that differs between runs or only records where a node came from. `from_node`
# holds id(graph); the rest are provenance that no backend serializes. `delegation_tag` is the
# partitioner's bookkeeping, numbered across the whole graph (Vulkan's "tag22" becomes "tag23"
# when an op is added anywhere) and stripped by ExecuTorch once the partition is lowered.
VOLATILE_META = frozenset(
    {"from_node", "stack_trace", "nn_module_stack", "torch_fn", "seq_nr", "delegation_tag"}
)


class Unkeyable(Exception):
    """The partition holds a value with no stable encoding; it is lowered without the cache."""


@dataclass(frozen=True)
class PartitionKeyDetails:
    format_version: int
    backend: str
    # "stable": node names and debug handles keyed by position, for backends whose output holds
    # neither (or holds handles lowerd can rebase); "exact": keyed as they are.
    naming: str
    torch_version: str
    executorch_version: str
    compile_specs: Encoded
    graph: Encoded
    submodules: Encoded
    signature: Encoded
    range_constraints: Encoded
    tensors: Encoded

    def digest(self) -> str:
        return hashlib.sha256(_pack(dataclasses.astuple(self))).hexdigest()

    def diff(self, other: PartitionKeyDetails) -> list[str]:
        """Names of the inputs that differ: the explanation of a cache miss."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]

    def summary(self) -> KeySummary:
        """What a build record keeps of this key: the small fields as they are, the large ones
        as digests, the weights one digest per tensor (so a later miss can name them)."""
        kept: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "tensors":
                kept[f.name] = {
                    name: _short_digest(encoded) for program in value for name, encoded in program
                }
            elif isinstance(value, int | str):
                kept[f.name] = value
            else:
                kept[f.name] = _short_digest(value)
        return KeySummary(**kept)


@dataclass(frozen=True)
class PartitionKey:
    details: PartitionKeyDetails
    # The debug handles of the programs in order of first appearance. With stable naming they are
    # not in the key: a hit built with other handles is rebased onto these.
    handles: tuple[int, ...]

    def digest(self) -> str:
        return self.details.digest()


def key_details(
    backend: str,
    programs: Sequence[ExportedProgram],
    compile_specs: Sequence[Sequence[Any]],
    stable_naming: bool = False,
    whole_ranges: bool = False,
) -> PartitionKey:
    """Key of one preprocess call; several programs when a backend preprocesses methods together.
    `whole_ranges`: key each program's whole range_constraints (a program fingerprint, whose
    symbols are all its graph's), not only its graph's symbols' ranges (a partition)."""
    encoders = [_Encoder(p.graph_module.graph, stable_naming) for p in programs]
    details = PartitionKeyDetails(
        format_version=FORMAT_VERSION,
        backend=backend,
        naming="stable" if stable_naming else "exact",
        torch_version=torch.__version__,
        executorch_version=_executorch_version(),
        compile_specs=tuple(_encode_compile_specs(specs) for specs in compile_specs),
        graph=tuple(e.graph(p.graph_module.graph) for e, p in zip(encoders, programs, strict=True)),
        submodules=tuple(
            e.submodules(p.graph_module) for e, p in zip(encoders, programs, strict=True)
        ),
        signature=tuple(e.signature(p) for e, p in zip(encoders, programs, strict=True)),
        # After the graphs: their encoders have named the unbacked symbols the ranges name.
        range_constraints=tuple(
            _encode_ranges(p) if whole_ranges else _encode_own_ranges(p, e)
            for e, p in zip(encoders, programs, strict=True)
        ),
        tensors=tuple(_tensor_digests(p) for p in programs),
    )
    handles = tuple(h for e in encoders for h in e.handles)
    return PartitionKey(details, handles)


@cache
def _executorch_version() -> str:
    return version("executorch")


def _short_digest(value: Any) -> str:
    return hashlib.sha256(_pack(value)).hexdigest()[:DIGEST_CHARS]


def _pack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _encode_compile_specs(specs: Iterable[Any]) -> Encoded:
    return tuple((spec.key, bytes(spec.value)) for spec in specs)


class _Encoder:
    """Encodes one program's graph. With stable naming, a node is named by its position, a
    debug handle and an unbacked symbol by their order of first appearance, so inserting an op
    elsewhere in the model, which renumbers all three across the whole graph, leaves this
    partition's key unchanged.

    Unbacked symbols: a ShapeEnv numbers them by a counter over everything it ever made, and
    stock's edge generation makes fresh ones in its replays (a partition after custom_sdpa holds
    u3 in stock's program, u1 in a regional one, for one graph and one lowering). What a backend
    with stable naming reads of a symbol is its range, not its name: XNNPACK sizes a dynamic
    tensor by its upper bound (exir/sym_util.eval_upper_bound: bound_sympy of the expression over
    its symbols' ranges) and serializes no symbol. So the key holds each expression with its
    unbacked symbols renamed `u#k`, and each renamed symbol's ranges (_encode_own_ranges). Backed
    symbols keep their names: export names them by input (s27 for a dim of input 2), alike in
    every program of one model. Two new unbacked symbols first met in one expression have no
    order of appearance between them: Unkeyable."""

    def __init__(self, graph: torch.fx.Graph, stable_naming: bool):
        self.stable = stable_naming
        self.positions = {node.name: f"%{i}" for i, node in enumerate(graph.nodes)}
        self.handles: list[int] = []
        self.unbacked: dict[Any, Any] = {}  # sympy Symbol -> its stable name's Symbol

    def symbolic(self, expression: Any) -> str:
        """A sympy expression as the key holds it: with stable naming, its unbacked symbols
        renamed by order of first appearance."""
        if not self.stable:
            return str(expression)
        return str(expression.xreplace(self.unbacked_names(expression.free_symbols)))

    def unbacked_names(self, symbols: Iterable[Any]) -> dict[Any, Any]:
        import sympy  # type: ignore[import-untyped]
        from torch.utils._sympy.symbol import SymT, symbol_is_type

        unbacked = [
            s for s in symbols if symbol_is_type(s, (SymT.UNBACKED_INT, SymT.UNBACKED_FLOAT))
        ]
        new = [s for s in unbacked if s not in self.unbacked]
        if len(new) > 1:
            raise Unkeyable(f"unbacked symbols {sorted(map(str, new))} first met together")
        for symbol in new:
            self.unbacked[symbol] = sympy.Symbol(f"u#{len(self.unbacked)}", **symbol.assumptions0)
        return {s: self.unbacked[s] for s in unbacked}

    def graph(self, graph: torch.fx.Graph) -> Encoded:
        return tuple(self.node(node) for node in graph.nodes)

    def node(self, node: torch.fx.Node) -> Encoded:
        meta = tuple(
            (name, self.meta(name, value))
            for name, value in sorted(node.meta.items())
            if name not in VOLATILE_META
        )
        return (
            node.op,
            self.name(node.name),
            self.target(node),
            _encode_value(node.args, self),
            _encode_value(node.kwargs, self),
            meta,
        )

    def name(self, name: str) -> str:
        return self.positions.get(name, name) if self.stable else name

    def target(self, node: torch.fx.Node) -> Any:
        """A placeholder's target is its name: the partition's input, named after the op that
        made it upstream (`aten_mul_tensor_13`), which an op added earlier in the model renames."""
        if node.op == "placeholder" and isinstance(node.target, str):
            return self.name(node.target)
        return _encode_value(node.target, self)

    def meta(self, name: str, value: Any) -> Any:
        if name == "debug_handle" and isinstance(value, int):
            if value not in self.handles:
                self.handles.append(value)
            return ("handle", self.handles.index(value)) if self.stable else value
        if name == "source_fn_stack" and self.stable:
            # [(fx name, module class or function)]: the fx name shifts like node names do.
            return _encode_value([fn for _, fn in value], self)
        return _encode_value(value, self)

    def submodules(self, graph_module: torch.fx.GraphModule) -> Encoded:
        """What get_attr nodes read: control-flow branches (cond, map, scan, while) as
        GraphModules, tensors by content, and other values (the pytree specs flat_apply calls a
        function with, holding that function) by their encoding."""
        encoded: list[Encoded] = []
        for node in graph_module.graph.nodes:
            if node.op != "get_attr":
                continue
            owner = getattr(graph_module, node.target, None)
            if isinstance(owner, torch.fx.GraphModule):
                branch = _Encoder(owner.graph, self.stable)
                branch.handles = self.handles  # one numbering across the whole partition
                branch.unbacked = self.unbacked
                encoded.append((node.target, branch.graph(owner.graph), branch.submodules(owner)))
            elif isinstance(owner, torch.Tensor):
                encoded.append((node.target, _tensor_digest(owner)))
            else:
                encoded.append((node.target, _encode_value(owner, self)))
        return tuple(encoded)

    def signature(self, program: ExportedProgram) -> Encoded:
        signature = program.graph_signature
        inputs = tuple(
            (spec.kind.name, self.argument(spec.arg), spec.target, spec.persistent)
            for spec in signature.input_specs
        )
        outputs = tuple(
            (spec.kind.name, self.argument(spec.arg), spec.target)
            for spec in signature.output_specs
        )
        return inputs, outputs

    def argument(self, argument: Any) -> Any:
        name = getattr(argument, "name", None)
        if isinstance(name, str):
            return (type(argument).__name__, self.name(name))
        return _encode_value(argument, self)


def _encode_ranges(program: ExportedProgram) -> Encoded:
    return tuple(sorted((str(sym), str(r)) for sym, r in program.range_constraints.items()))


def _encode_own_ranges(program: ExportedProgram, encoder: _Encoder) -> Encoded:
    """The symbol ranges a partition's preprocess can read: those of the symbols its own graph
    holds (in its nodes' metadata, its branches' too), as its program's range_constraints has
    them and as their ShapeEnv has them, and whether any other entry is a bool range.

    Why not the whole dict: a partition's program gets a copy of its whole tagged program's
    range_constraints (backend_api.py), which stock's edge generation remakes from the whole
    ShapeEnv (_get_updated_range_constraints: every symbol any pass ever made, the replays'
    fresh unbacked ones numbered by the ShapeEnv's counter). An edit elsewhere in the model, or
    regional edge generation (region_edge.py, fewer replays), numbers them otherwise while this
    partition's graph and lowering are the same. What the backends read of it:
    - XNNPACK: a symbolic size's upper bound, exir/sym_util.eval_upper_bound, bound_sympy of the
      val's expression over its ShapeEnv's var_to_range: the ranges of that expression's
      symbols, which are this graph's (its own ShapeEnv column here); xnnpack_preprocess copies
      range_constraints into its own program, read by nothing else of it.
    - Core ML: coremltools' exir_utils maps every range_constraints entry to a RangeDim by name
      and uses those named by an input's shape (this graph's symbols: their column here); a
      bool range raises in that map whatever its symbol (the flag here).
    Every symbol of an expression in a value is among free_symbols, so an input's shape, a
    node's size and a bound are all covered; the graph column already holds their names, as
    `encoder` named them (stable names for unbacked symbols), under which they are listed."""
    from torch.fx.experimental.symbolic_shapes import free_symbols

    symbols: set[Any] = set()
    shape_env = None
    for value in _meta_values(program.graph_module):
        held = free_symbols(value)
        if held and shape_env is None:
            shape_env = _shape_env_of(value)
        symbols |= held
    ranges = program.range_constraints
    own = tuple(
        sorted(
            (
                encoder.symbolic(sym),
                str(ranges[sym]) if sym in ranges else None,
                str(shape_env.var_to_range.get(sym)) if shape_env is not None else None,
            )
            for sym in sorted(symbols, key=str)  # an order to name any not yet met in
        )
    )
    other_bool = any(r.is_bool for sym, r in ranges.items() if sym not in symbols)
    return own, other_bool


def _meta_values(graph_module: torch.fx.GraphModule) -> Iterable[Any]:
    """Every metadata value of the graph's nodes and of its branches' (control flow)."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                for name, value in node.meta.items():
                    if name not in VOLATILE_META:
                        yield from _flat(value)


def _flat(value: Any) -> Iterable[Any]:
    if isinstance(value, (list, tuple)):
        for each in value:
            yield from _flat(each)
    elif isinstance(value, dict):
        for each in value.values():
            yield from _flat(each)
    elif isinstance(value, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
        yield value


def _shape_env_of(value: Any) -> Any:
    """The ShapeEnv of a symbolic value: a SymInt's own, or one of a tensor's sizes'."""
    if isinstance(value, torch.Tensor):
        for size in (*value.shape, *value.stride(), value.storage_offset()):
            if isinstance(size, torch.SymInt):
                return size.node.shape_env
        return None
    return value.node.shape_env


def _tensor_digests(program: ExportedProgram) -> Encoded:
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


def _tensor_digest(value: Any) -> Encoded:
    if not isinstance(value, torch.Tensor):
        raise Unkeyable(f"constant of type {type(value).__name__} has no content digest")
    tensor = value.detach()
    return (
        str(tensor.dtype),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        hashlib.sha256(_tensor_bytes(tensor)).hexdigest(),
    )


def _tensor_bytes(tensor: torch.Tensor) -> memoryview | bytes:
    """The logical contents, read where they lie (no copy into a bytes object: every weight of
    the program is hashed per build). A strided view and its contiguous copy hold the same
    weights."""
    flat = tensor.contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data if flat.numel() else b""


def _encode_value(value: Any, encoder: _Encoder | None = None) -> Any:  # noqa: C901
    """A deterministic, msgpack-able encoding; raises Unkeyable rather than guess."""
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return value
    if isinstance(value, float):
        return ("float", value.hex())  # exact: 0.1 and 0.1000000001 must not collide
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_encode_value(v, encoder) for v in value))
    if isinstance(value, dict):
        return (
            "dict",
            tuple((_encode_value(k, encoder), _encode_value(v, encoder)) for k, v in value.items()),
        )
    if isinstance(value, torch.fx.Node):
        return ("node", encoder.name(value.name) if encoder else value.name)
    if isinstance(value, torch.Tensor):
        return _encode_tensor_meta(value, encoder)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        if encoder is not None and value.node.is_symbolic():
            return ("sym", encoder.symbolic(value.node.expr))
        return ("sym", str(value))
    if encoder is not None and _is_sympy(value):  # unbacked_bindings' keys, for one
        return ("sympy", encoder.symbolic(value))
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return ("torch", str(value))
    if isinstance(value, enum.Enum):
        return ("enum", type(value).__qualname__, _encode_value(value.value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = tuple(
            (f.name, _encode_value(getattr(value, f.name), encoder))
            for f in dataclasses.fields(value)
        )
        return ("dataclass", type(value).__qualname__, fields)
    if isinstance(value, type):
        return ("type", f"{value.__module__}.{value.__qualname__}")
    if _versioned_function(value):
        return ("function", f"{value.__module__}.{value.__qualname__}")
    if isinstance(value, torch._ops.HigherOrderOperator) and _versioned_type(type(value)):
        return ("hop", f"{type(value).__module__}.{type(value).__qualname__}", str(value.name()))  # type: ignore[no-untyped-call]  # torch leaves HigherOrderOperator.name unannotated
    return _encode_by_repr(value)


# Packages whose functions are named in a key by module and name: their code changes only with
# the torch and ExecuTorch versions the key holds. A function of any other module (the user's, a
# library's) could change under the same name, so it stays unkeyable.
_VERSIONED_PACKAGES = frozenset({"torch", "executorch", "operator", "_operator", "math"})


def _versioned_function(value: Any) -> bool:
    """A plain function of torch's or ExecuTorch's own, such as the call_function target
    torch._functorch.predispatch.lazy_load_decompositions that export leaves in a Llama."""
    if not isinstance(value, types.FunctionType | types.BuiltinFunctionType):
        return False
    return _versioned_type(value)


def _versioned_type(value: Any) -> bool:
    module = getattr(value, "__module__", None) or ""
    return module.split(".")[0] in _VERSIONED_PACKAGES and "<locals>" not in value.__qualname__


def _is_sympy(value: Any) -> bool:
    import sympy

    return isinstance(value, sympy.Basic)


def _encode_tensor_meta(tensor: torch.Tensor, encoder: _Encoder | None) -> Encoded:
    """A tensor in metadata (meta["val"], eager_input_vals) is keyed by what it describes; its
    strides also decide its dim order."""
    return (
        "tensor",
        str(tensor.dtype),
        tuple(_encode_value(s, encoder) for s in tensor.shape),
        tuple(_encode_value(s, encoder) for s in tensor.stride()),
        tensor.requires_grad,
    )


def _encode_by_repr(value: Any) -> Encoded:
    # Op overloads, EdgeOpOverloads, quantization specs and AOT descriptors print their identity.
    # An object that prints its address cannot be keyed across runs.
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        raise Unkeyable(f"{type(value).__qualname__} has no stable encoding: {text[:80]}")
    return ("repr", f"{type(value).__module__}.{type(value).__qualname__}", text)
