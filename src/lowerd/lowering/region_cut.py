"""A lifted program's regions, their structure, and one region cut out as its own program.

The regions of regional edge generation (lowering/region_edge.py): each element of a ModuleList
(`model.layers.3`) whose call_function nodes are contiguous is a layer; everything else
(embeddings, rotary tables, masks, final norm, head) is the rest, one region that may lie on both
sides of the layers. Two regions with the same `structure` get the same edge nodes from ExecuTorch's
edge generation (region_edge.py argues why, for the validated versions), so one is generated alone,
cut out with `cut`, and copied for the others.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import torch

_INDEXED = re.compile(r"^(.*)\.(\d+)$")


def layer_path(node: torch.fx.Node) -> str | None:
    """The ModuleList element the node belongs to: the outermost path ending in `.<index>`."""
    for path, _ in (node.meta.get("nn_module_stack") or {}).values():
        if _INDEXED.match(path):
            return str(path)
    return None


@dataclass
class Region:
    key: str | None  # the layer's path, None for the rest
    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node] = field(default_factory=list)  # external, in first-use order
    outputs: list[torch.fx.Node] = field(default_factory=list)  # used outside, in node order


def regions(program: Any) -> list[Region] | None:
    """The layers (contiguous runs of one ModuleList element) and the rest, or None if a layer
    is not contiguous."""
    found: dict[str | None, Region] = {}
    previous: str | None = None
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        key = layer_path(node)
        if key is not None and key in found and previous != key:
            return None
        found.setdefault(key, Region(key, [])).nodes.append(node)
        previous = key
    for region in found.values():
        inside = set(region.nodes)
        for node in region.nodes:
            for arg in node.all_input_nodes:
                if arg not in inside and arg not in region.inputs:
                    region.inputs.append(arg)
            if any(user not in inside for user in node.users):
                region.outputs.append(node)
    return list(found.values())


def weight_specs(program: Any) -> dict[str, Any]:
    """The program's parameter, buffer and constant inputs by placeholder name."""
    return {s.arg.name: s for s in program.graph_signature.input_specs if s.target is not None}


def structure(program: Any, region: Region) -> tuple[Any, ...]:
    """What makes two regions' edge generation the same: ops, argument structure and values,
    value metadata, which nodes are used outside, and which inputs are parameters, buffers
    (persistent or not) or activations (with their values)."""
    index = {node: i for i, node in enumerate(region.nodes)}
    names = canonical_symbols(region)
    kinds = {name: (s.kind.name, s.persistent) for name, s in weight_specs(program).items()}
    outputs = set(region.outputs)

    def arg(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            if value in index:
                return ("node", index[value])
            return (kinds.get(value.name, "input"), region.inputs.index(value))
        if isinstance(value, (list, tuple)):
            return tuple(arg(v) for v in value)
        if isinstance(value, str):
            return assertion(value, names, {node.name: i for node, i in index.items()})
        if isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            return _size(value, names)
        return repr(value)

    return tuple(
        (
            str(node.target),
            arg(node.args),
            tuple(sorted((k, arg(v)) for k, v in node.kwargs.items())),
            value_meta(node.meta.get("val"), names),
            node in outputs,
        )
        for node in region.nodes
    ) + (
        tuple(value_meta(i.meta.get("val"), names) for i in region.inputs),
        source_fns(region),
        symbol_ranges(region),
    )


def unbacked_symbols(region: Region) -> list[Any]:
    """The unbacked symbols the region's nodes bind (each `.item()`'s `u0`), in binding order."""
    found: dict[Any, None] = {}
    for node in region.nodes:
        for symbol in node.meta.get("unbacked_bindings") or {}:
            found.setdefault(symbol)
    return list(found)


def symbol_ranges(region: Region) -> tuple[str, ...]:
    """The range the ShapeEnv knows of each unbacked symbol the region binds (the replays'
    fresh symbols and runtime assertions follow from it, and it holds what no node shows)."""
    ranges = []
    for node in region.nodes:
        for symbol in node.meta.get("unbacked_bindings") or {}:
            shape_env = node.meta["val"].node.shape_env
            ranges.append(str(shape_env.var_to_range.get(symbol)))
    return tuple(ranges)


def canonical_symbols(region: Region) -> dict[Any, Any]:
    """Each unbacked symbol the region binds -> its place among them, as a symbol: two layers
    whose `.item()`s bind u0 and u2 have one structure."""
    import sympy  # type: ignore[import-untyped]

    return {
        s: sympy.Symbol(f"unbacked{i}", integer=True)
        for i, s in enumerate(unbacked_symbols(region))
    }


ASSERTION = re.compile(r"^Runtime assertion failed for expression (.*) on node '(.*)'$", re.S)
UNBACKED = re.compile(r"\bu\d+\b")
# The runtime assertions export and the replays make of what a ShapeEnv knows of a symbol: the
# symbolic comparisons they check and the checks themselves.
CHECKS = frozenset(
    {
        "aten._assert_scalar.default",
        "aten.sym_constrain_range_for_size.default",
        "aten.sym_constrain_range.default",
    }
)
SYM_COMPARISONS = frozenset({"ge", "gt", "le", "lt", "eq", "ne"})
# The symbolic arithmetic an assertion's expression is computed with (update_cache's check of a
# dynamic length: `s27 + u0 <= 8`, its `add` of the length and start_pos).
SYM_ARITHMETIC = frozenset({"add", "sub", "mul"})


def is_check(node: torch.fx.Node) -> bool:
    """A runtime assertion's node: a check, or the symbolic comparison (a SymBool) or arithmetic
    (a SymInt) it checks, of values holding an unbacked symbol (with backed ones or not)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    target = node.target
    if str(target) in CHECKS:
        return True
    value = node.meta.get("val")
    if getattr(target, "__module__", None) != "_operator":
        return False
    name = getattr(target, "__name__", None)
    comparison = name in SYM_COMPARISONS and isinstance(value, torch.SymBool)
    arithmetic = name in SYM_ARITHMETIC and isinstance(value, torch.SymInt)
    return (comparison or arithmetic) and bool(free_unbacked_symbols(value))


def assertion(message: str, names: dict[Any, Any], places: dict[str, Any]) -> Any:
    """A runtime assertion's message (`_assert_scalar`'s, naming its symbols and the node it
    checks) with the region's symbols and nodes by their places; another string as itself."""
    found = ASSERTION.match(message)
    if found is None:
        return repr(message)
    by_name = {str(symbol): str(canonical) for symbol, canonical in names.items()}
    expression = UNBACKED.sub(lambda m: by_name.get(m.group(0), m.group(0)), found.group(1))
    return ("assertion", expression, places.get(found.group(2), found.group(2)))


def source_fns(region: Region) -> tuple[Any, ...]:
    """The shape of each node's `source_fn_stack` (strict export's [(fx name, module class or
    function)]): the fx names by their first place among the region's, which differ between
    layers, the callables by name. Two regions of one shape have one-to-one names, so a copy
    takes its own node's stack at the template's place (region_assembly.PER_LAYER_META)."""
    first: dict[str, int] = {}

    def shape(stack: Any) -> Any:
        if stack is None:
            return None
        return tuple((first.setdefault(name, len(first)), _callable(fn)) for name, fn in stack)

    return tuple(shape(node.meta.get("source_fn_stack")) for node in region.nodes)


def _callable(fn: Any) -> str:
    """A module class or function by its qualified name (a method called on a tensor is its
    name already: "view")."""
    if isinstance(fn, str):
        return fn
    if isinstance(fn, torch._ops.HigherOrderOperator):  # an instance: its repr has its address
        return f"torch.ops.higher_order.{fn.name()}"  # type: ignore[no-untyped-call]
    return f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', repr(fn))}"


def value_meta(value: Any, names: dict[Any, Any] | None = None) -> Any:
    """A value's description: a tensor's shape, dtype, stride and requires_grad, a symbolic
    value by its expression (with `names`' symbols renamed)."""
    if isinstance(value, torch.Tensor):
        shape = tuple(_size(d, names) for d in value.shape)
        stride = tuple(_size(d, names) for d in value.stride())
        return (shape, value.dtype, stride, value.requires_grad)
    if isinstance(value, (list, tuple)):
        return tuple(value_meta(v, names) for v in value)
    if isinstance(value, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return _size(value, names)
    return repr(value)


def _size(size: Any, names: dict[Any, Any] | None = None) -> Any:
    """A size, or a symbolic value by its expression (a SymInt does not hash)."""
    if not isinstance(size, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return size
    expr = size.node.expr
    return ("sym", str(expr.xreplace(names) if names else expr))


def attr(module: Any, target: str) -> Any:
    for part in target.split("."):
        module = getattr(module, part)
    return module


@dataclass
class _Cut:
    """A cut program's pieces while it is made."""

    graph: torch.fx.Graph = field(default_factory=torch.fx.Graph)
    root: torch.nn.Module = field(default_factory=torch.nn.Module)
    env: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)
    specs: list[Any] = field(default_factory=list)
    users: list[Any] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)


def cut_user_inputs(region: Region, weights: dict[str, Any]) -> list[torch.fx.Node]:
    """The region's inputs its cut takes as user inputs, in the cut's order: the symbolic sizes
    first, then the activations (each in first-use order). A replay's tracer binds a SymInt to
    the first input it meets that carries it and keeps that binding: an activation first would
    bind the size to a `sym_size` of the activation, a node stock's whole program does not have
    (its sizes are bound to the program's own input, in the rest); the size input first binds
    it to the placeholder the assembly maps to the region's input."""
    users = [i for i in region.inputs if i.op != "get_attr" and i.name not in weights]
    sizes = [i for i in users if isinstance(i.meta.get("val"), torch.SymInt)]
    return sizes + [i for i in users if i not in sizes]


def cut(program: Any, region: Region) -> Any:
    """The region's aten nodes as their own ExportedProgram: its parameters, buffers and
    constants as they are in the program, its other inputs as user inputs, what is used outside
    as outputs. Node names and metadata are the whole program's."""
    from torch.export.graph_signature import InputKind, InputSpec, SymIntArgument, TensorArgument

    weights = weight_specs(program)
    made = _Cut()
    ordered = [i for i in region.inputs if i.name in weights]
    ordered += [i for i in region.inputs if i.op == "get_attr" and i.name not in weights]
    ordered += cut_user_inputs(region, weights)
    for node in [i for i in ordered if i.op == "get_attr"]:
        setattr(made.root, str(node.target), attr(program.graph_module, str(node.target)))
        made.env[node] = made.graph.get_attr(str(node.target))
        made.env[node].meta = copy.copy(node.meta)
    for node in [i for i in ordered if i.op != "get_attr"]:
        made.env[node] = made.graph.placeholder(node.name)
        made.env[node].meta = copy.copy(node.meta)
        spec = weights.get(node.name)
        if spec is None:
            sized = isinstance(node.meta["val"], torch.SymInt)  # a symbolic size: SymInt input
            argument = (SymIntArgument if sized else TensorArgument)(node.name)
            made.specs.append(InputSpec(InputKind.USER_INPUT, argument, None))
            made.users.append(node.meta["val"])
        elif spec.target in program.state_dict:
            made.specs.append(copy.copy(spec))
            made.state[spec.target] = program.state_dict[spec.target]
        else:
            made.specs.append(copy.copy(spec))
            made.constants[spec.target] = program.constants[spec.target]
    for node in region.nodes:
        made.env[node] = made.graph.node_copy(node, made.env.__getitem__)
    out = made.graph.output(tuple(made.env[n] for n in region.outputs))
    out.meta = {}
    return _program(program, region, made)


def _program(program: Any, region: Region, made: _Cut) -> Any:
    from torch.export import ExportedProgram
    from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
    from torch.export.graph_signature import (
        ExportGraphSignature,
        OutputKind,
        OutputSpec,
        TensorArgument,
    )
    from torch.utils import _pytree

    in_spec = _pytree.tree_flatten((tuple(made.users), {}))[1]
    out_spec = _pytree.tree_flatten(tuple(n.meta["val"] for n in region.outputs))[1]
    outputs = [
        OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(n.name), None) for n in region.outputs
    ]
    entry = ModuleCallEntry("", ModuleCallSignature([], [], in_spec, out_spec))
    return ExportedProgram(
        root=made.root,
        graph=made.graph,
        graph_signature=ExportGraphSignature(made.specs, outputs),
        state_dict=made.state,
        range_constraints=dict(program.range_constraints),
        module_call_graph=[entry],
        example_inputs=None,
        constants=made.constants,
        verifiers=program.verifiers,
    )
