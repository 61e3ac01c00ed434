"""Region templates kept across builds: each region's edge program (region_edge.py's template)
in the content-addressed store, so an edit of one layer generates only the edited layer's
template and every other template is read back.

A template is what ExecuTorch's edge generation made of one region cut out alone. The assembly
(region_assembly.py) reads of it: the edge graph's nodes in order (op, name, target, argument
structure, metadata), which nodes are the outputs, the signature's parameter, buffer and user
inputs, the lifted constants' tensors, the preserved ops, the id of the cut graph its from_node
chains lead to, and, of the template region, each aten node's name and per-layer metadata
(nn_module_stack, stack_trace, torch_fn: the lookup table a copy's own values are found in) and
the region's inputs. The entry holds exactly that, as msgpack of plain data and raw bytes:

- targets by name (edge-dialect, aten overloads, higher-order ops, operator's functions: a sym
  op's `ge`), resolved to the very object (checked when stored: the name must resolve to the
  target itself);
- arguments as tagged plain values (nodes by index, ints, floats, bools, strings, dtypes,
  devices, layouts, memory formats, tuples and lists as they were);
- metadata field by field, only the keys listed in `_META` (any other key makes the template
  unstorable: the next build generates it again). A dynamic program's sizes (a sym node's
  value, a fake tensor's shape and stride: `s11`, `64*s11`; an assertion's `s11 + u0 <= 8`)
  are written as their expressions in the program's backed symbols and read back as the same
  expressions in the reading program's ShapeEnv (size_expressions.py); unbacked symbols, and
  the names a runtime assertion's message gives them, as the region's own or the replays'
  fresh ones (template_symbols.py); strict export's
  `example_value` as "the node's val" (the very object, as region_edge.py argues it), its
  `source_fn_stack` callables by module and name (torch.ops' overloads, packets and higher-order
  ops by their op names), found again only in modules already imported (reading never imports:
  a user's module is imported by its own build), its `eager_input_vals`
  as plain and fake values, fx's immutable lists and dicts there as such. `val` as shape,
  stride, dtype, device and requires_grad (all the assembly's `fake` reads of it); from_node
  chains link by link (name, target, graph id, pass, actions), so `region_root` finds the same
  names in the same cut graph; `desc` as its kind (a weight's names its own placeholder's
  weight, rebased below; a plain input's index); `original_aten` by name (an op of ExecuTorch's
  EDGE_DO_NOT_DECOMP namespace by the op it stands for, defined on read as the lowering that
  keeps it defines it); the rest plain values;
- weight placeholders by the index of the region input they stand for: read back for another
  region of the same structure (the first of it in this program, which a previous build may
  have copied from another layer), their names, specs and `desc` are that region's weights, as
  the assembly's `_input_index` and `own_desc` identify them (by position in the region's
  inputs). Every region of the program is then a copy (none is the template's own region),
  which region_edge.py's argument covers field by field; the template region's per-layer
  metadata is the stored region's, looked up as for any copy;
- outputs with their kinds: a user output, or a buffer's new value (a KV cache a layer writes in
  place: BUFFER_MUTATION) by the index of the region input it writes, rebased as weights are;
- the rest (embeddings, masks, head: one region, never copied) is read back for itself alone:
  its edge values take metadata from its inputs and lifted constants that no lookup in its own
  nodes finds, so they are kept as stored, which is what a run on its cut makes now only while
  its nodes are named and carry the per-layer metadata they had (`_other_metadata`: a line
  moved above the forward changes its stack traces). Otherwise the entry is a plain miss
  (`Outdated`) and the rest's template is generated again. Its from_node links are made from
  its own nodes, as a copy's are. Strict export keys the stacks of modules it reached through
  an attribute by their id() (`'140646288978704': ('model', ...)`): read back, each stored key
  is the key the rest's own node at the same place gives the same module now.

The key holds what can change a template: this module's format, lowerd's regional modules'
source (region_cut, region_edge, region_assembly and this one: what is generated and how it is
read), the validated versions of torch and ExecuTorch, the region's `structure` (whether it is a
layer or the rest), what each backed symbol of the program is (its name, sources, range,
replacement and hint: a size is written by the symbol's name; a template's run cannot change
them, region_edge.py's `_backed_facts` gate), the EdgeCompileConfig's fields, each partitioner's
class and configuration
(its op configs' classes and settings, precisions, per-op mode, delegation spec) and the
transform passes. A value the key cannot spell exactly (a repr with an address) leaves the
template unstored.

Reading is untrusted: the store verifies the entry's digest; a payload of another shape, a
truncated one, a name that resolves to nothing, or a graph that does not rebuild as stored is a
miss (counted in `unreadable`, logged at debug level), and the template is generated again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import operator
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import torch

from lowerd.cache.store import BlobStore
from lowerd.lowering import size_expressions, template_symbols
from lowerd.lowering.edge_speedups import VALIDATED_VERSIONS
from lowerd.lowering.region_assembly import PER_LAYER_META, Template, program_fake_mode
from lowerd.lowering.region_cut import Region, weight_specs
from lowerd.lowering.tensor_codec import decode_tensors, encode_tensors

log = logging.getLogger(__name__)

KIND = "regiontemplate"
FORMAT_VERSION = 3
# Modules whose code decides what a template holds and how the assembly reads it.
_HOLDERS = ("state_dict", "constants")  # where an edge program keeps a lifted constant
_SOURCES = (
    "region_cut.py",
    "region_edge.py",
    "region_assembly.py",
    "template_store.py",
    "size_expressions.py",
    "template_symbols.py",
)


class Unstorable(Exception):
    """Something of the template the entry cannot hold exactly: it is not stored."""


class Unreadable(Exception):
    """An entry that does not decode to a template: a miss."""


class Outdated(Exception):
    """The rest's entry, made when its nodes' metadata were other than now: a plain miss."""


@dataclass(frozen=True)
class StoredEdge:
    """A template's edge program as read back: what the assembly reads of one."""

    graph_module: torch.fx.GraphModule
    graph_signature: Any  # torch.export.ExportGraphSignature
    state_dict: dict[str, torch.Tensor]
    constants: dict[str, Any]

    @property
    def graph(self) -> torch.fx.Graph:
        return self.graph_module.graph


@dataclass
class TemplateStore:
    """The store's templates for one lowering; counts what it served."""

    store: BlobStore | None
    reused: int = 0
    stored: int = 0
    unreadable: int = 0
    problems: list[str] = field(default_factory=list)

    def key(
        self, program: Any, region: Region, shape: Any, config: Any, partitioners: list[Any]
    ) -> str | None:
        if self.store is None:
            return None
        try:
            return template_key(program, region, shape, config, partitioners)
        except Unstorable as why:
            log.debug("region template not keyed: %s", why)
            return None

    def get(self, key: str | None, program: Any, region: Region) -> Template | None:
        """The stored template for `region` (the first of its structure), or None."""
        if key is None or self.store is None:
            return None
        payload = self.store.get(key, KIND)
        if payload is None:
            return None
        try:
            template = decode(payload, program, region)
        except Outdated as why:
            log.debug("region template %s of the rest not used: %s", key[:12], why)
            return None
        except Unreadable as why:
            self.unreadable += 1
            self.problems.append(f"region template {key[:12]}: {why}")
            log.debug("region template %s unreadable, generated again: %s", key[:12], why)
            return None
        self.reused += 1
        return template

    def put(self, key: str | None, program: Any, template: Template) -> None:
        if key is None or self.store is None:
            return
        try:
            payload = _copyable_payload(program, template)
        except (Unstorable, Unreadable, Outdated) as why:
            log.debug("region template of %s not stored: %s", template.region.key, why)
            return
        if self.store.put(key, payload, KIND):
            self.stored += 1


def _copyable_payload(program: Any, template: Template) -> bytes:
    """The entry, checked to read back as a template the assembly can copy: onto every region
    of its structure, or, for a rest no lookup can copy, onto the rest alone while its
    metadata are the same (`own`)."""
    region = template.region
    payload = encode(program, template)
    try:
        _check_copyable(decode(payload, program, region), region)
        return payload
    except Unstorable:
        if region.key is not None:
            raise
    payload = encode(program, template, own=True)
    _check_copyable(decode(payload, program, region), region)
    return payload


def _check_copyable(template: Template, region: Region) -> None:
    """A template read back is copied onto every region of its structure, the first included
    (none is its own region): each edge node must descend from a node of the region and each
    per-layer value be found at places of the region holding one value, as the assembly's
    `meta_for` finds it. A template made of the region it is stored from must be so; a rest
    whose edge nodes take values its inputs carry is stored `own` instead: read back for itself
    alone, its metadata kept while the region's are the same, each rooted node found in it."""
    from lowerd.lowering.region_assembly import Copy, NotLocal, region_root
    from lowerd.lowering.region_cut import is_check

    copy_ = Copy(template, region)
    for node in template.edge.graph.nodes:
        try:
            rooted = region_root(node, template.cut_graph) in copy_.places
            # the rest's own sym nodes (an input's size bound) and a layer's runtime assertions
            # have no root: the assembly places them (region_assembly.py's _segment_of), as for
            # the template made now
            rootless = template.own_metadata or is_check(node)
            if node.op == "call_function" and (rooted or not rootless):
                copy_.own(node)
        except NotLocal as error:
            raise Unstorable(str(error)) from error
        if template.own_metadata:
            continue
        for key in PER_LAYER_META:
            if key in node.meta:
                try:
                    copy_.own_value(key, node.meta[key], node.name)
                except NotLocal as error:
                    raise Unstorable(f"{node.name}'s {key} is not its region's") from error


# -- the key ---------------------------------------------------------------------------------


def template_key(
    program: Any, region: Region, shape: Any, config: Any, partitioners: list[Any]
) -> str:
    digest = hashlib.sha256()
    here = Path(__file__).parent
    parts = [f"format {FORMAT_VERSION}", f"versions {sorted(VALIDATED_VERSIONS.items())}"]
    parts += [f"{name} {_file_digest(here / name)}" for name in _SOURCES]
    parts += [f"rest {region.key is None}", f"structure {_structure(region, shape)}"]
    # a dynamic program's sizes are written by symbol name: the name's meaning is in the key
    parts += [f"symbols {size_expressions.symbol_facts(_shape_env(program))}"]
    parts += [f"config {_spelled(_config_fields(config))}"]
    parts += [f"partitioner {_spelled(_partitioner(each))}" for each in partitioners]
    for part in parts:
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _structure(region: Region, shape: Any) -> str:
    """The structure's repr with each Python function a node calls (the rest's higher-order
    ops and vmap's stateful calls, whose str holds their address) by module and name."""
    text = repr(shape)
    for node in region.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) or target is operator.getitem:
            continue
        if isinstance(target, torch._ops.HigherOrderOperator):
            text = text.replace(repr(str(target)), repr(f"higher-order {target.name()}"))  # type: ignore[no-untyped-call]
            continue
        module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(name, str) or "<" in name:
            raise Unstorable(f"a call of {target!r}")
        text = text.replace(repr(str(target)), repr(f"{module}.{name}"))
    return _spelled(text)


def _spelled(value: Any) -> str:
    """The value's repr, refused where it would not be the same in another process."""
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        raise Unstorable(f"an unkeyable value: {text[:80]}")
    return text


def _config_fields(config: Any) -> list[tuple[str, Any]]:
    fields = []
    for option in dataclasses.fields(config):
        value = getattr(config, option.name)
        if option.name == "_core_aten_ops_exception_list":
            value = sorted(map(str, value))
        fields.append((option.name, value))
    return fields


def _partitioner(partitioner: Any) -> Any:
    inner = getattr(partitioner, "inner", partitioner)
    kind = type(inner)
    configs = getattr(inner, "target_partitioner_configs", None)
    if not isinstance(configs, dict):
        raise Unstorable(f"a partitioner without op configs ({kind.__name__})")
    spec = inner.delegation_spec
    return (
        f"{kind.__module__}.{kind.__qualname__}",
        getattr(inner, "per_op_mode", None),
        spec.backend_id,
        [(s.key, bytes(s.value)) for s in spec.compile_specs],
        [
            (name, f"{type(c).__module__}.{type(c).__qualname__}", sorted(vars(c).items()))
            for name, c in configs.items()
        ],
    )


# -- plain values ----------------------------------------------------------------------------

_ENUMS: dict[str, type] = {
    "dtype": torch.dtype,
    "layout": torch.layout,
    "memory_format": torch.memory_format,
}


_ARGUMENT_KINDS: dict[type, type] = {
    torch.fx.immutable_collections.immutable_list: list,
    torch.fx.immutable_collections.immutable_dict: dict,
}


def _value(
    value: Any,
    nodes: dict[torch.fx.Node, int] | None = None,
    symbols: template_symbols.Written | None = None,
) -> Any:
    """A tagged plain value (nodes by index where `nodes` is given; fake tensors and symbolic
    values where `symbols`, the template's, is)."""
    kind = type(value)
    if nodes is not None:
        # fx keeps a node's list and dict arguments as immutable_list/immutable_dict, which
        # map_arg (the assembly's copy) makes of any list or dict: read back as list and dict.
        kind = _ARGUMENT_KINDS.get(kind, kind)
    elif kind in _IMMUTABLE:
        # in metadata (eager_input_vals' arguments) fx's own kinds are held as they are
        return [_IMMUTABLE[kind], _value(_ARGUMENT_KINDS[kind](value), nodes, symbols)]
    if value is None:
        return ["none"]
    if kind in (bool, int, float, str):
        return [kind.__name__, value]
    if kind in (tuple, list):
        return [kind.__name__, [_value(v, nodes, symbols) for v in value]]
    if kind is dict and all(type(k) is str for k in value):
        return ["dict", [[k, _value(v, nodes, symbols)] for k, v in value.items()]]
    if kind is torch.device:
        return ["device", str(value)]
    for tag, enum in _ENUMS.items():
        if kind is enum:
            return [tag, str(value)]
    if kind is torch.fx.Node and nodes is not None and value in nodes:
        return ["node", nodes[value]]
    if kind is torch._ops.OpOverload:  # the op a higher-order op calls (auto_functionalized's)
        return ["opoverload", _target(value)]
    if symbols is not None and kind in _SYMBOLIC:
        return [_SYMBOLIC[kind], _size(value, symbols)]
    if symbols is not None and kind is torch._subclasses.fake_tensor.FakeTensor:
        return [
            "fake",
            [_dim(d, symbols) for d in value.shape],
            [_dim(s, symbols) for s in value.stride()],
            str(value.dtype),
            str(value.device),
            bool(value.requires_grad),
        ]
    raise Unstorable(f"a value of {kind.__name__}")


_IMMUTABLE: dict[type, str] = {kind: f"immutable {kind.__name__}" for kind in _ARGUMENT_KINDS}
_SYMBOLIC: dict[type, str] = {torch.SymInt: "symint", torch.SymBool: "symbool"}


def _dim(size: Any, symbols: template_symbols.Written) -> Any:
    """A fake tensor's size or stride: an int as it is, a symbolic one as its expression."""
    if type(size) is int:
        return size
    if type(size) is torch.SymInt:
        return ["symint", _size(size, symbols)]
    raise Unstorable(f"a size of {type(size).__name__}")


def _size(size: torch.SymInt | torch.SymBool, symbols: template_symbols.Written) -> Any:
    try:
        return size_expressions.written(size, symbols.unbacked)
    except size_expressions.NotWritable as why:
        raise Unstorable(str(why)) from why


def _written(write: Callable[..., Any], *args: Any) -> Any:
    try:
        return write(*args)
    except size_expressions.NotWritable as why:
        raise Unstorable(str(why)) from why


def _readable(read: Callable[..., Any], *args: Any) -> Any:
    try:
        return read(*args)
    except size_expressions.NotReadable as why:
        raise Unreadable(str(why)) from why


@dataclass(frozen=True)
class _Sizes:
    """What a template's values are read back in: the program's fake mode (its ShapeEnv) and
    the template's unbacked symbols as the reading region's."""

    mode: Any
    symbols: template_symbols.Reading


def _read_dim(plain: Any, sizes: _Sizes) -> Any:
    if type(plain) is int:
        return plain
    if type(plain) is list and len(plain) == 2 and plain[0] == "symint":
        return _read_symbolic(plain[1], sizes, torch.SymInt)
    raise Unreadable(f"a size {plain!r}")


def _read_symbolic(plain: Any, sizes: _Sizes, kind: type) -> Any:
    try:
        value = size_expressions.read(
            plain, getattr(sizes.mode, "shape_env", None), sizes.symbols.unbacked
        )
    except size_expressions.NotReadable as why:
        raise Unreadable(str(why)) from why
    if type(value) is not kind:
        raise Unreadable(f"a {kind.__name__} that reads as {type(value).__name__}")
    return value


def _shape_env(program: Any) -> Any:
    """A dynamic program's ShapeEnv (its backed symbols), None for a static one."""
    return getattr(program_fake_mode(program), "shape_env", None)


def _read(plain: Any, nodes: list[torch.fx.Node] | None, sizes: _Sizes | None) -> Any:
    tag, *rest = plain
    for kind, name in _IMMUTABLE.items():
        if tag == name and len(rest) == 1:
            return kind(_read(rest[0], nodes, sizes))
    if tag == "fake" and sizes is not None:
        return _fake_tensor(sizes, plain)
    for kind, name in _SYMBOLIC.items():
        if tag == name and sizes is not None and len(rest) == 1:
            return _read_symbolic(rest[0], sizes, kind)
    if tag == "none" and not rest:
        return None
    [payload] = rest
    if tag in ("bool", "int", "float", "str"):
        if type(payload).__name__ != tag:
            raise Unreadable(f"a {tag} holding {type(payload).__name__}")
        return payload
    if tag in ("tuple", "list"):
        items = [_read(v, nodes, sizes) for v in payload]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return {_str(k): _read(v, nodes, sizes) for k, v in payload}
    if tag == "device":
        return torch.device(_str(payload))
    if tag in _ENUMS:
        return _named(tag, payload)
    if tag == "node" and nodes is not None:
        return nodes[payload]
    if tag == "opoverload":
        return _resolved(payload)
    raise Unreadable(f"a value tagged {tag!r}")


def _named(tag: str, name: Any) -> Any:
    found = getattr(torch, _str(name).removeprefix("torch."), None)
    if type(found) is not _ENUMS[tag] or str(found) != name:
        raise Unreadable(f"no {tag} {name!r}")
    return found


def _fake_tensor(sizes: _Sizes, plain: list[Any]) -> torch.Tensor:
    tag, shape, stride, dtype, device, grad = plain
    if tag != "fake" or type(grad) is not bool or type(shape) is not list:
        raise Unreadable("a value that is not a fake tensor")
    if type(stride) is not list:
        raise Unreadable("a fake tensor's stride that is not a list")
    with sizes.mode:
        made = torch.empty_strided(
            [_read_dim(d, sizes) for d in shape],
            [_read_dim(s, sizes) for s in stride],
            dtype=_named("dtype", dtype),
            device=torch.device(_str(device)),
        )
    return made.requires_grad_(grad)


def _str(value: Any) -> str:
    if type(value) is not str:
        raise Unreadable(f"a name of {type(value).__name__}")
    return value


# -- targets ---------------------------------------------------------------------------------


def _target(target: Any) -> list[Any]:
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    if target is operator.getitem:
        plain = ["getitem"]
    elif getattr(target, "__module__", None) == "_operator":  # a sym op: `ge` of a SymInt
        plain = ["operator", _str_of(getattr(target, "__name__", None))]
    elif isinstance(target, torch._ops.HigherOrderOperator):  # auto_functionalized_v2
        plain = ["higher_order", target.name()]  # type: ignore[no-untyped-call]
    elif type(target) is EdgeOpOverload:
        op = target._op
        plain = ["edge", op.namespace, op._opname, op._overloadname]
    elif type(target) is torch._ops.OpOverload:
        plain = ["op", target.namespace, target._opname, target._overloadname]
    else:
        raise Unstorable(f"a call of {target}")
    if _resolved(plain) is not target:
        raise Unstorable(f"{target} is not found again by its name")
    return plain


def _resolved(plain: Any) -> Any:
    try:
        if plain == ["getitem"]:
            return operator.getitem
        if len(plain) == 2 and plain[0] == "higher_order":
            return _found_caller(plain)
        if len(plain) == 2 and plain[0] == "operator":
            found = getattr(operator, _str(plain[1]))
            if getattr(found, "__module__", None) != "_operator":
                raise Unreadable(f"no operator {plain[1]!r}")
            return found
        kind, namespace, name, overload = plain
        if kind == "edge":
            from executorch.exir.dialects._ops import ops as exir_ops

            root: Any = exir_ops.edge
        elif kind == "op":
            root = torch.ops
        else:
            raise Unreadable(f"a target of kind {kind!r}")
        return getattr(getattr(getattr(root, _str(namespace)), _str(name)), _str(overload))
    except (AttributeError, RuntimeError, ValueError, TypeError) as error:
        raise Unreadable(f"no op {plain!r}") from error


# -- metadata --------------------------------------------------------------------------------

# ExecuTorch's namespace of the ops a partitioner keeps from decomposition, defined as needed.
_NO_DECOMP = "EDGE_DO_NOT_DECOMP"

# Keys the entry holds, as what: any other key makes the template unstorable.
_META = {
    "val": "fake",
    "tensor_meta": "plain",
    "nn_module_stack": "plain",
    "stack_trace": "plain",
    "torch_fn": "plain",
    "custom": "plain",
    "seq_nr": "plain",
    "debug_handle": "plain",
    "original_aten": "op",
    "from_node": "sources",
    "desc": "desc",
    "eager_input_vals": "fake",  # the template's; nothing of these versions reads it
    "example_value": "val",
    "source_fn_stack": "callers",
    "unbacked_bindings": "bindings",  # template_symbols.py
}


def _meta(meta: dict[str, Any], fqn: str | None, symbols: template_symbols.Written) -> list[Any]:
    plain = []
    for key, value in meta.items():
        how = _META.get(key)
        if how is None:
            raise Unstorable(f"metadata {key!r}")
        if how == "op":
            encoded = _original_aten(value)
        elif how == "sources":
            encoded = [_source(s) for s in _list(value)]
        elif how == "desc":
            encoded = _desc(value, fqn)
        elif how == "val":
            _check_same_as_val(meta, key)
            encoded = None
        elif how == "callers":
            encoded = [[_str_of(name), _caller(fn)] for name, fn in _pairs(value)]
        elif how == "bindings":
            encoded = _written(symbols.bindings, value)
        else:
            encoded = _value(value, symbols=symbols if how == "fake" else None)
        plain.append([key, encoded])
    return plain


def _check_same_as_val(meta: dict[str, Any], key: str) -> None:
    """Strict export's `example_value` is held only as what it is wherever the assembly meets
    it: the very object that is the node's `val` (region_edge.py); read back it is that again."""
    if meta[key] is not meta.get("val"):
        raise Unstorable(f"{key} is not the node's val")


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    if type(value) is not list or any(type(p) is not tuple or len(p) != 2 for p in value):
        raise Unstorable(f"a source_fn_stack of {type(value).__name__}")
    return value


def _str_of(value: Any) -> str:
    if type(value) is not str:
        raise Unstorable(f"a name of {type(value).__name__}")
    return value


def _caller(fn: Any) -> list[Any]:
    """A source_fn_stack callable (a module class or a function; a tensor method is its name):
    by module and qualified name, stored only where that name finds the very object again."""
    if type(fn) is str:
        return ["method", fn]
    if type(fn) is torch._ops.OpOverload:  # a torch.ops call a strict trace records
        return _target(fn)
    if type(fn) is torch._ops.OpOverloadPacket:  # torch.ops.llama.update_cache(...)
        plain: list[Any] = ["packet", fn._qualified_op_name]
        if _found_caller(plain) is not fn:
            raise Unstorable(f"{fn!r} is not found again by its name")
        return plain
    if isinstance(fn, torch._ops.HigherOrderOperator):  # autocast's wrap: one instance a name
        plain = ["higher_order", fn.name()]  # type: ignore[no-untyped-call]
        if _found_caller(plain) is not fn:
            raise Unstorable(f"{fn!r} is not found again by its name")
        return plain
    module = getattr(fn, "__module__", None)
    # torch's own functions are builtins of a class torch does not export (`torch.relu`'s
    # qualified name is `_VariableFunctionsClass.relu`): found by their name in their module
    for name in (getattr(fn, "__qualname__", None), getattr(fn, "__name__", None)):
        plain = ["callable", module, name]
        try:
            if _found_caller(plain) is fn:
                return plain
        except Unreadable:
            continue
    raise Unstorable(f"{fn!r} is not found again by its name")


def _found_caller(plain: Any) -> Any:
    """The callable a stored name names, looked up only in modules already imported (reading
    an entry never imports: a module of the user's is imported by its own build, or missing)."""
    kind, *rest = plain
    if kind == "method" and len(rest) == 1:
        return _str(rest[0])
    if kind == "op":
        return _resolved(plain)
    if kind == "packet" and len(rest) == 1:
        namespace, _, name = _str(rest[0]).partition("::")
        try:
            packet = getattr(getattr(torch.ops, namespace), name)
        except (AttributeError, RuntimeError) as error:
            raise Unreadable(f"no op {rest[0]!r}") from error
        if type(packet) is not torch._ops.OpOverloadPacket:
            raise Unreadable(f"no op {rest[0]!r}")
        return packet
    if kind == "higher_order" and len(rest) == 1:
        operator_ = getattr(torch.ops.higher_order, _str(rest[0]), None)
        if not isinstance(operator_, torch._ops.HigherOrderOperator):
            raise Unreadable(f"no higher-order op {rest[0]!r}")
        return operator_
    module, qualname = rest if kind == "callable" and len(rest) == 2 else (None, None)
    if type(module) is not str or type(qualname) is not str or "<" in qualname:
        raise Unreadable(f"a caller {plain!r}")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is None:
        raise Unreadable(f"no {module}.{qualname} among the imported modules")
    return found


def _original_aten(value: Any) -> list[Any] | None:
    """`original_aten` by name: the replays leave a copy of the overload there (not the object
    torch.ops holds), which nothing of these versions reads (region_edge.py); read back it is
    torch.ops' own overload of that name."""
    if value is None:
        return None
    if type(value) is not torch._ops.OpOverload:
        raise Unstorable(f"original_aten {value!r}")
    plain: list[Any] = ["op", value.namespace, value._opname, value._overloadname]
    if value.namespace == _NO_DECOMP:
        from executorch.exir.program._program import transform_op_to_aten_op

        aten = transform_op_to_aten_op.get(str(value))
        if type(aten) is not torch._ops.OpOverload:
            raise Unstorable(f"original_aten {value} stands for no op")
        plain = ["no_decomp", _target(aten)]
    if str(_read_original_aten(plain)) != str(value):
        raise Unstorable(f"original_aten {value} is not found again by its name")
    return plain


def _read_original_aten(plain: Any) -> Any:
    """An op of ExecuTorch's namespace of ops kept from decomposition exists once a lowering
    that keeps its op has defined it: defined here as that lowering does (`_register_no_decomp_op`
    does nothing for an op defined already), so an entry read first in a process finds it."""
    if plain is None:
        return None
    if type(plain) is list and len(plain) == 2 and plain[0] == "no_decomp":
        from executorch.exir.program._program import (
            _register_no_decomp_op,
            aten_op_to_transform_op,
        )

        aten = _resolved(plain[1])
        _register_no_decomp_op(aten)
        return aten_op_to_transform_op[aten]
    return _resolved(plain)


def _list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise Unstorable(f"from_node of {type(value).__name__}")
    return value


def _source(source: Any) -> list[Any]:
    from torch.fx.traceback import NodeSource

    if type(source) is not NodeSource or type(source.pass_name) is not str:
        raise Unstorable(f"a from_node link of {type(source).__name__}")
    info = source.node_info
    node = None if info is None else [str(info.name), str(info.target), int(info.graph_id)]
    actions = [action.name for action in source.action]
    return [node, source.pass_name, actions, [_source(s) for s in _list(source.from_node)]]


def _read_source(plain: Any) -> Any:
    from torch.fx.traceback import NodeSource, NodeSourceAction

    node, pass_name, actions, sources = plain
    made = NodeSource(None, _str(pass_name), [NodeSourceAction[_str(a)] for a in actions])
    if node is not None:
        name, target, graph_id = node
        if type(graph_id) is not int:
            raise Unreadable("a from_node link without a graph id")
        made.node_info = NodeSource.NodeInfo(_str(name), _str(target), graph_id)
    made.from_node = [_read_source(s) for s in sources]
    return made


def _desc(desc: Any, fqn: str | None) -> list[Any]:
    from torch._functorch._aot_autograd.descriptors import (
        BufferAOTInput,
        ParamAOTInput,
        PlainAOTInput,
    )

    if type(desc) in (ParamAOTInput, BufferAOTInput) and desc.target == fqn:
        return ["weight", type(desc).__name__]  # the placeholder's own weight, rebased on read
    if type(desc) is PlainAOTInput and type(desc.idx) is int:
        return ["plain", desc.idx]
    raise Unstorable(f"a desc {desc!r}")


def _read_desc(plain: Any, fqn: str | None) -> Any:
    from torch._functorch._aot_autograd.descriptors import (
        BufferAOTInput,
        ParamAOTInput,
        PlainAOTInput,
    )

    kind, detail = plain
    if kind == "plain" and type(detail) is int:
        return PlainAOTInput(detail)
    weights = {"ParamAOTInput": ParamAOTInput, "BufferAOTInput": BufferAOTInput}
    if kind == "weight" and detail in weights and fqn is not None:
        return weights[detail](target=fqn)
    raise Unreadable(f"a desc {plain!r}")


def _read_meta(plain: Any, sizes: _Sizes | None, fqn: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key, value in plain:
        how = _META.get(_str(key))
        if how is None or key in meta:
            raise Unreadable(f"metadata {key!r}")
        if how == "op":
            meta[key] = _read_original_aten(value)
        elif how == "sources":
            meta[key] = [_read_source(s) for s in value]
        elif how == "desc":
            meta[key] = _read_desc(value, fqn)
        elif how == "val":
            if value is not None:
                raise Unreadable(f"{key} holding a value")
            meta[key] = None  # the val's object, set once every key is read
        elif how == "callers":
            meta[key] = [(_str(name), _found_caller(fn)) for name, fn in value]
        elif how == "bindings" and sizes is not None:
            meta[key] = _readable(sizes.symbols.bindings, value)
        else:
            meta[key] = _read(value, None, sizes if how == "fake" else None)
    for key, how in _META.items():
        if how == "val" and key in meta:
            if "val" not in meta:
                raise Unreadable(f"{key} without a val")
            meta[key] = meta["val"]
    return meta


# -- the entry -------------------------------------------------------------------------------


def encode(program: Any, template: Template, own: bool = False) -> bytes:
    """The template as plain data; raises Unstorable for anything it cannot hold exactly.
    `own`: read back for its own region alone, its metadata kept (the rest's)."""
    edge, region = template.edge, template.region
    symbols = template_symbols.Written.of(program, region, _shape_env(program))
    weights = {name: spec.target for name, spec in weight_specs(program).items()}
    fqns = [weights.get(node.name) for node in region.inputs]
    signature = edge.graph_signature
    specs = {spec.arg.name: spec for spec in signature.input_specs}
    if any(module is not edge.graph_module for module in edge.graph_module.modules()):
        raise Unstorable("a nested module")
    index: dict[torch.fx.Node, int] = {}
    nodes: list[Any] = []
    output = None
    for node in edge.graph.nodes:
        if node.type is not None:
            raise Unstorable(f"{node.name} has a type")
        if node.op == "placeholder":
            spec = specs[node.name]
            role = _role(edge, spec, fqns)
            nodes.append(["placeholder", role, _meta(node.meta, spec.target, symbols)])
        elif node.op == "call_function":
            if _asserts(node):
                _written(symbols.message, node.args[1])
            args = [_value(node.args, index), _value(dict(node.kwargs), index)]
            meta = _meta(node.meta, None, symbols)
            nodes.append(["call_function", node.name, _target(node.target), args, meta])
        elif node.op == "output" and output is None:
            kinds = [_output_kind(spec, fqns) for spec in signature.output_specs]
            output = [_value(list(node.args[0]), index), kinds]
        else:
            raise Unstorable(f"a {node.op} node")
        index[node] = len(index)
    if output is None:
        raise Unstorable("no output")
    per_layer = [
        [
            node.name,
            _meta({k: node.meta[k] for k in PER_LAYER_META if k in node.meta}, None, symbols),
        ]
        for node in region.nodes
    ]
    entry = {
        "format": FORMAT_VERSION,
        "cut_graph": template.cut_graph,
        "region": per_layer,
        "nodes": nodes,
        "output": output,
        "preserved": [_target(op) for op in template.preserved],
        "own": own,
        "bound": symbols.names(),  # the names its assertions give the region's symbols
        "fresh": _written(symbols.facts),
    }
    try:
        packed: bytes = msgpack.packb(entry, use_bin_type=True)
    except (OverflowError, TypeError, ValueError) as error:
        raise Unstorable(str(error)) from error
    return packed


def _asserts(node: torch.fx.Node) -> bool:
    """A runtime assertion: its message names the symbols it checks."""
    return (
        node.target is torch.ops.aten._assert_scalar.default
        and len(node.args) == 2
        and type(node.args[1]) is str
    )


def _output_kind(spec: Any, fqns: list[str | None]) -> list[Any]:
    """What a template output is: a user output, or the new value of a buffer the region reads
    (by its index among the region's inputs, rebased on read as a weight placeholder is)."""
    kind = spec.kind.name
    if kind == "USER_OUTPUT":
        return ["user"]
    if kind == "BUFFER_MUTATION" and fqns.count(spec.target) == 1:
        return ["buffer", fqns.index(spec.target)]
    raise Unstorable(f"a {kind} output of {spec.target}")


def _role(edge: Any, spec: Any, fqns: list[str | None]) -> list[Any]:
    """What a template placeholder stands for: a region input (a weight by its index among the
    region's inputs, a user input by its name) or a lifted constant (its tensor)."""
    kind, name = spec.kind.name, spec.arg.name
    persistent = spec.persistent
    if kind == "USER_INPUT":
        return ["user", name]
    if kind in ("PARAMETER", "BUFFER") and spec.target in fqns:
        if fqns.count(spec.target) != 1:
            raise Unstorable(f"{spec.target} is two inputs")
        return ["weight", kind, fqns.index(spec.target), persistent]
    if kind == "BUFFER" and spec.target is not None:
        holder = _HOLDERS[0] if spec.target in edge.state_dict else _HOLDERS[1]
        tensor = getattr(edge, holder).get(spec.target)
        if type(tensor) is not torch.Tensor or tensor.device.type != "cpu":
            raise Unstorable(f"lifted {spec.target} is not a plain CPU tensor")
        if tensor.requires_grad or not tensor.is_contiguous() or tensor.storage_offset():
            raise Unstorable(f"lifted {spec.target} is not a plain tensor")
        return ["lifted", name, spec.target, holder, persistent, encode_tensors([tensor])]
    raise Unstorable(f"a {kind} input {name}")


def decode(payload: bytes, program: Any, region: Region) -> Template:
    """The stored template read back for `region`; raises Unreadable for anything else."""
    try:
        entry = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        if type(entry) is not dict or entry.get("format") != FORMAT_VERSION:
            raise Unreadable("another format")
        return _template(entry, program, region)
    except (Unreadable, Outdated):
        raise
    except Exception as error:  # untrusted input: any other shape is a miss, never a crash
        raise Unreadable(f"{type(error).__name__}: {error}") from error


def _template(entry: dict[str, Any], program: Any, region: Region) -> Template:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.export.graph_signature import (
        ExportGraphSignature,
    )

    weights = {name: spec.target for name, spec in weight_specs(program).items()}
    # a dynamic program's own mode, as the assembly's: its sizes are the program's symbols
    mode = program_fake_mode(program) or FakeTensorMode()
    symbols = _readable(
        template_symbols.Reading.of, mode.shape_env, region, entry["bound"], entry["fresh"]
    )
    sizes = _Sizes(mode, symbols)
    graph = torch.fx.Graph()
    made: list[torch.fx.Node] = []
    specs = []
    state: dict[str, torch.Tensor] = {}
    constants: dict[str, Any] = {}
    for plain in entry["nodes"]:
        if plain[0] == "placeholder":
            _, role, meta = plain
            name, spec, fqn = _input(role, region, weights)
            if role[0] == "lifted":
                _, _, target, holder, _, packed = role
                tensors = decode_tensors(packed) if type(packed) is bytes else None
                if tensors is None or len(tensors) != 1 or holder not in _HOLDERS:
                    raise Unreadable(f"lifted {target} does not decode")
                (state if holder == "state_dict" else constants)[target] = tensors[0]
            node = graph.placeholder(name)
            node.meta = _read_meta(meta, sizes, fqn)
            specs.append(spec)
        elif plain[0] == "call_function":
            _, name, target, (args, kwargs), meta = plain
            node = graph.create_node(
                "call_function",
                _resolved(target),
                _read(args, made, None),
                _read(kwargs, made, None),
                name=_str(name),
            )
            node.meta = _read_meta(meta, sizes, None)
            if _asserts(node):
                node.args = (node.args[0], _readable(symbols.message, node.args[1]))
        else:
            raise Unreadable(f"a {plain[0]!r} node")
        if node.name != name:
            raise Unreadable(f"{node.name} is not named as stored")
        made.append(node)
    values, kinds = entry["output"]
    outputs = _read(values, made, None)
    if type(kinds) is not list or len(kinds) != len(outputs):
        raise Unreadable("outputs and their kinds differ in number")
    graph.output(tuple(outputs))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    out_specs = [
        _output_spec(kind, node, region, weights) for kind, node in zip(kinds, outputs, strict=True)
    ]
    signature = ExportGraphSignature(specs, out_specs)
    stand_in = _stand_in(entry["region"], region)
    preserved = [_resolved(op) for op in entry["preserved"]]
    cut_graph = entry["cut_graph"]
    if type(cut_graph) is not int:
        raise Unreadable("no cut graph id")
    edge = StoredEdge(module, signature, state, constants)
    own = entry["own"]
    if type(own) is not bool or (own and region.key is not None):
        raise Unreadable(f"own {own!r} for {region.key}")
    if own:
        _rekey_modules(stand_in, region, graph)
        if (why := _other_metadata(stand_in, region)) is not None:
            raise Outdated(why)
    return Template(stand_in, edge, cut_graph, preserved, own_metadata=own)


def _output_spec(kind: Any, node: Any, region: Region, weights: dict[str, str]) -> Any:
    """An output's spec, a buffer's new value rebased on `region`'s own input at the place."""
    from torch.export.graph_signature import OutputKind, OutputSpec, TensorArgument

    if type(node) is not torch.fx.Node:
        raise Unreadable("an output that is not a node")
    if kind == ["user"]:
        return OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(node.name), None)
    if type(kind) is list and len(kind) == 2 and kind[0] == "buffer" and type(kind[1]) is int:
        fqn = weights.get(region.inputs[kind[1]].name)
        if fqn is None:
            raise Unreadable(f"input {kind[1]} of {region.key} is not a buffer")
        return OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(node.name), fqn)
    raise Unreadable(f"an output kind {kind!r}")


def _input(role: list[Any], region: Region, weights: dict[str, str]) -> tuple[str, Any, str | None]:
    """A placeholder's name, input spec and weight name, rebased on `region`'s own inputs."""
    from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

    if role[0] == "user":
        name = _str(role[1])
        return name, InputSpec(InputKind.USER_INPUT, TensorArgument(name), None), None
    if role[0] == "weight":
        _, kind, index, persistent = role
        if kind not in ("PARAMETER", "BUFFER") or type(index) is not int:
            raise Unreadable(f"a weight role {role!r}")
        node = region.inputs[index]
        fqn = weights.get(node.name)
        if fqn is None:
            raise Unreadable(f"input {index} of {region.key} is not a weight")
        spec = InputSpec(InputKind[kind], TensorArgument(node.name), fqn, persistent)
        return node.name, spec, fqn
    if role[0] == "lifted":
        _, name, target, _, persistent, _ = role
        spec = InputSpec(InputKind.BUFFER, TensorArgument(_str(name)), _str(target), persistent)
        return name, spec, target
    raise Unreadable(f"a placeholder role {role[0]!r}")


def _rekey_modules(stand_in: Region, region: Region, graph: torch.fx.Graph) -> None:
    """Strict export keys a module reached through an attribute by its id() in the exporting
    process (`'140646288978704': ('model', ...LlamaForCausalLM)`): each key of the rest's stored
    stacks becomes the key the region's node at the same place gives the same module now,
    in the stand-in and in the template's nodes alike; a key with no such counterpart is
    Outdated."""
    keys: dict[str, str] = {}
    for stored, node in zip(stand_in.nodes, region.nodes, strict=True):
        theirs, mine = stored.meta.get("nn_module_stack"), node.meta.get("nn_module_stack")
        if type(theirs) is not dict or type(mine) is not dict:
            continue
        if list(theirs.values()) != list(mine.values()):
            return  # other modules: _other_metadata says where
        for their_key, my_key in zip(theirs, mine, strict=True):
            if keys.setdefault(their_key, my_key) != my_key:
                raise Outdated(f"module key {their_key} is two modules' now")
    for node in dict.fromkeys([*stand_in.nodes, *graph.nodes]):
        stack = node.meta.get("nn_module_stack")
        if type(stack) is dict:
            if any(key not in keys for key in stack):
                raise Outdated(f"{node.name}'s nn_module_stack names a module no node has now")
            node.meta["nn_module_stack"] = {keys[key]: value for key, value in stack.items()}


def _other_metadata(stand_in: Region, region: Region) -> str | None:
    """Where the region's nodes differ from those the rest's template was made of, in name or
    per-layer metadata (a line moved above the model's forward): None when they are the same.
    The rest's template is then what a run on its cut now makes, its values kept as stored."""
    from lowerd.lowering.region_assembly import _frozen as frozen

    for stored, node in zip(stand_in.nodes, region.nodes, strict=True):
        if stored.name != node.name:
            return f"{node.name} was {stored.name}"
        for key in PER_LAYER_META:
            if frozen(stored.meta.get(key)) != frozen(node.meta.get(key)):
                return f"{node.name}'s {key} changed"
    return None


def _stand_in(plain: Any, region: Region) -> Region:
    """The stored template region: its aten nodes' names and per-layer metadata (what a copy
    looks its own values up by), with `region`'s inputs (what the weights are rebased on) and
    the symbols `region` binds at the same places (what the template's are read back as)."""
    graph = torch.fx.Graph()
    nodes = []
    if len(plain) != len(region.nodes):
        raise Unreadable(f"{len(plain)} region nodes for {len(region.nodes)}")
    for (name, meta), own in zip(plain, region.nodes, strict=True):
        node = torch.fx.Node(graph, _str(name), "placeholder", name, (), {})
        node.meta = _read_meta(meta, None, None)
        if set(node.meta) - set(PER_LAYER_META):
            raise Unreadable(f"region metadata {sorted(node.meta)}")
        if bindings := own.meta.get("unbacked_bindings"):
            node.meta["unbacked_bindings"] = bindings
        nodes.append(node)
    return Region(region.key, nodes, list(region.inputs), list(region.outputs))
