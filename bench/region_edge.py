"""Regional edge generation (a bench experiment): ExecuTorch's edge generation run once per
distinct layer structure, the whole edge program assembled from the results.

`regional_edge_manager` is a drop-in for `executorch.exir.program._program.
_gen_edge_manager_for_partitioners`; `regional()` patches it in. bench/region_locality.py
compares what it makes with stock's, node by node and by .pte bytes; bench/README.md's depth
section says what was found. Nothing here is on lowerd's build path.

How a program is assembled:
- regions: the call_function nodes whose nn_module_stack holds the same ModuleList element (the
  outermost path ending in `.<index>`) form a layer, which must be contiguous in node order;
  everything else (embeddings, rotary tables, masks, final norm, head) is the rest, one region
  that may be split around the layers;
- templates: regions with the same structure (aten ops, argument structure, kwargs, value
  metadata, kinds of external inputs: parameter, buffer, activation) share one template, the
  first of them, cut out of the lifted program as its own ExportedProgram (weights stay
  parameters/buffers, other inputs become user inputs, node names and metadata kept) and run
  through the stock function alone;
- copies: each region's edge nodes are its template's, emitted in the whole program's order,
  with the region's own inputs; per-node metadata (nn_module_stack, stack_trace, torch_fn) is
  the region's own aten value at the place the template's value came from; values are remade
  (shape, stride, dtype, requires_grad) in one fake mode; node names are made by fx from the
  template name's base, as the stock retrace made them; constants the edge passes lift are
  renumbered `_lifted_tensor_constant<buffers + i>` in order of first use; unused parameters are
  dropped; debug handles are numbered as DebugHandleGeneratorPass numbers them (first
  appearance of a node's first ancestor); placeholders take the template placeholder's metadata;
  a value's requires_grad is the template's, or, where an input carries grad and the template's
  value does not (its activation inputs come in without grad), what the op gives on fake values.

Anything it cannot copy (a layer split in two runs, a template node with no ancestor in its
region, a per-layer field with two values at one place) falls back to the stock function.
These rules were found by diffs on transformers' Llama, not derived from every pass's code: see
bench/README.md for what a product version would still have to gate and argue.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

_INDEXED = re.compile(r"^(.*)\.(\d+)$")
_SUFFIX = re.compile(r"_\d+$")
# Per-node metadata the stock run copies from the aten node a node descends from.
_PER_LAYER_META = ("nn_module_stack", "stack_trace", "torch_fn")


# -- regions -------------------------------------------------------------------------------------


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


def structure(program: Any, region: Region) -> tuple[Any, ...]:
    """What makes two layers' edge generation the same: ops, argument structure, values, and
    which inputs are parameters."""
    index = {node: i for i, node in enumerate(region.nodes)}
    weights = {
        s.arg.name: s.kind.name for s in program.graph_signature.input_specs if s.target is not None
    }

    def arg(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            if value in index:
                return ("node", index[value])
            kind = weights.get(value.name, "input")
            return (kind, region.inputs.index(value))
        if isinstance(value, (list, tuple)):
            return tuple(arg(v) for v in value)
        return repr(value)

    return tuple(
        (
            str(node.target),
            arg(node.args),
            tuple(sorted((k, arg(v)) for k, v in node.kwargs.items())),
            value_meta(node.meta.get("val")),
            node in region.outputs,
        )
        for node in region.nodes
    ) + (tuple(value_meta(i.meta.get("val")) for i in region.inputs),)


def value_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.dtype, tuple(value.stride()), value.requires_grad)
    if isinstance(value, (list, tuple)):
        return tuple(value_meta(v) for v in value)
    return repr(value)


# -- one region alone ----------------------------------------------------------------------------


def cut(program: Any, region: Region) -> Any:
    """The region's aten nodes as their own ExportedProgram: its parameters as parameters, its
    other inputs as user inputs, what is used outside as outputs. Node names and metadata are
    the whole program's."""
    from torch.export import ExportedProgram
    from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
    from torch.export.graph_signature import (
        ExportGraphSignature,
        InputKind,
        InputSpec,
        OutputKind,
        OutputSpec,
        TensorArgument,
    )
    from torch.utils import _pytree

    weights = {s.arg.name: s for s in program.graph_signature.input_specs if s.target is not None}
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    specs, users = [], []
    ordered = [i for i in region.inputs if i.name in weights] + [
        i for i in region.inputs if i.name not in weights
    ]
    root = torch.nn.Module()
    for node in [i for i in ordered if i.op == "get_attr"]:
        setattr(root, node.target, _attr(program.graph_module, node.target))
        env[node] = graph.get_attr(node.target)
        env[node].meta = copy.copy(node.meta)
    state, constants = {}, {}
    for node in [i for i in ordered if i.op != "get_attr"]:
        env[node] = graph.placeholder(node.name)
        env[node].meta = copy.copy(node.meta)
        if node.name in weights:
            specs.append(copy.copy(weights[node.name]))
            target = weights[node.name].target
            if target in program.state_dict:
                state[target] = program.state_dict[target]
            else:
                constants[target] = program.constants[target]
        else:
            specs.append(InputSpec(InputKind.USER_INPUT, TensorArgument(node.name), None))
            users.append(node.meta["val"])
    for node in region.nodes:
        env[node] = graph.node_copy(node, env.__getitem__)
    out = graph.output(tuple(env[n] for n in region.outputs))
    out.meta = {}
    in_spec = _pytree.tree_flatten((tuple(users), {}))[1]
    out_spec = _pytree.tree_flatten(tuple(n.meta["val"] for n in region.outputs))[1]
    outputs = [
        OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(n.name), None) for n in region.outputs
    ]
    entry = ModuleCallEntry("", ModuleCallSignature([], [], in_spec, out_spec))
    return ExportedProgram(
        root=root,
        graph=graph,
        graph_signature=ExportGraphSignature(specs, outputs),
        state_dict=state,
        range_constraints={},
        module_call_graph=[entry],
        example_inputs=None,
        constants=constants,
        verifiers=program.verifiers,
    )


def _requires_grad(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return any(_requires_grad(v) for v in value)
    return False


def _lacks_grad(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.dtype.is_floating_point and not value.requires_grad
    if isinstance(value, (list, tuple)):
        return any(_lacks_grad(v) for v in value)
    return False


def _copy_grad(source: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor) and isinstance(source, torch.Tensor):
        value.requires_grad_(source.requires_grad)
    elif isinstance(value, (list, tuple)) and isinstance(source, (list, tuple)):
        for item, made in zip(source, value, strict=True):
            _copy_grad(item, made)
    else:
        raise NotLocal(f"a result of {type(source).__name__} for a {type(value).__name__}")


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _attr(module: Any, target: str) -> Any:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def stock_edge(program: Any, config: Any = None, partitioners: Any = None) -> Any:
    """The stock function on one program, with the given partitioners (default: XNNPACK's)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program import _program

    stock = _program.__dict__.get("_stock_gen", _program._gen_edge_manager_for_partitioners)
    return stock(
        {"forward": partitioners if partitioners is not None else [XnnpackPartitioner()]},
        {"forward": program},
        config or EdgeCompileConfig(),
        None,
    )


def root_name(node: torch.fx.Node) -> str:
    source = node.meta["from_node"][-1]
    while source.from_node:
        source = source.from_node[-1]
    return str(source.name)


def signature_of(node: torch.fx.Node) -> Any:
    def arg(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return "node"
        if isinstance(a, (list, tuple)):
            return tuple(arg(x) for x in a)
        return repr(a)

    return (
        str(node.target),
        arg(node.args),
        tuple(sorted((k, arg(v)) for k, v in node.kwargs.items())),
        value_meta(node.meta.get("val")),
    )


# -- assembly ------------------------------------------------------------------------------------


@dataclass
class Template:
    region: Region
    edge: Any  # the region's edge ExportedProgram, generated alone
    preserved: list[Any]  # ops the partitioner kept from decomposition
    seconds: float


def templates_for(
    program: Any, found: list[Region], config: Any, partitioners: list[Any]
) -> tuple[dict[Any, Template], list[Any]]:
    """One edge generation per distinct region structure (the rest is its own)."""
    by_structure: dict[Any, Template] = {}
    keys = []
    for region in found:
        key = (region.key is None, structure(program, region))
        keys.append(key)
        if key not in by_structure:
            started = time.process_time()
            own = copy.copy(config)
            own._core_aten_ops_exception_list = list(config._core_aten_ops_exception_list)
            manager = stock_edge(cut(program, region), own, partitioners)
            by_structure[key] = Template(
                region,
                manager.exported_program("forward"),
                list(own._core_aten_ops_exception_list),
                time.process_time() - started,
            )
    return by_structure, keys


class NotLocal(Exception):
    """The program is not one this assembly can copy exactly."""


@dataclass
class Copy:
    """One region's copy of its template."""

    template: Template
    region: Region
    env: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        theirs = self.template.region.nodes
        self.places = {node.name: i for i, node in enumerate(theirs)}
        # Per per-layer field: the template's value -> the values this region holds there.
        self.values: dict[str, dict[Any, list[Any]]] = {}
        for key in _PER_LAYER_META:
            found = self.values[key] = {}
            for mine, their in zip(self.region.nodes, theirs, strict=True):
                found.setdefault(_frozen(their.meta.get(key)), []).append(mine.meta.get(key))

    def own(self, root: str) -> torch.fx.Node | None:
        """This region's aten node at the place of the template's node `root`."""
        place = self.places.get(root)
        return None if place is None else self.region.nodes[place]


class Assembly:
    """The whole edge graph built from the templates' edge graphs, in the whole program's order."""

    def __init__(self, program: Any):
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.program = program
        self.fake_mode = FakeTensorMode()
        self.graph = torch.fx.Graph()
        self.owner = torch.nn.Module()
        self.amap: dict[torch.fx.Node, torch.fx.Node] = {}  # whole aten node -> assembled node
        self.handle_key: dict[torch.fx.Node, Any] = {}
        self.placeholder_done: set[torch.fx.Node] = set()
        self.lifted: list[tuple[torch.fx.Node, torch.Tensor]] = []
        signature = program.graph_signature
        self.buffers = len(signature.buffers)
        self.first_user: torch.fx.Node | None = None
        self.segment: dict[torch.fx.Node, int] = {}
        current: Any = object()
        for node in program.graph.nodes:
            if node.op == "placeholder":
                new = self.graph.placeholder(node.name)
                new.meta = dict(node.meta)
                new.meta["val"] = self.fake(node.meta["val"])
                self.amap[node] = new
                if node.name in signature.user_inputs and self.first_user is None:
                    self.first_user = new
            elif node.op == "call_function":
                key = layer_path(node)
                if key != current:
                    current = key
                    self.segment[node] = len(set(self.segment.values()))
                else:
                    self.segment[node] = max(self.segment.values())

    def fake(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            with self.fake_mode:
                made = torch.empty_strided(
                    value.shape, value.stride(), dtype=value.dtype, device=value.device
                )
            return made.requires_grad_(value.requires_grad)
        if isinstance(value, (list, tuple)):
            return type(value)(self.fake(v) for v in value)
        return value

    def build(self, copies: list[Copy]) -> None:
        queue = []
        for order, copy_ in enumerate(copies):
            last = -1
            outputs = {}
            [out] = [n for n in copy_.template.edge.graph.nodes if n.op == "output"]
            for j, produced in enumerate(out.args[0]):
                if produced.op != "call_function":
                    raise NotLocal(f"output {j} of {copy_.region.key} is an input")
                outputs.setdefault(produced, []).append(j)
            for step, node in enumerate(copy_.template.edge.graph.nodes):
                if node.op != "call_function":
                    continue
                own = copy_.own(root_name(node))
                if own is None:
                    raise NotLocal(f"{node.name} descends from no node of its region")
                segment = self.segment[own]
                if segment < last:
                    raise NotLocal(f"{copy_.region.key}'s edge nodes leave its order")
                last = segment
                queue.append((segment, order, step, copy_, node, outputs.get(node, [])))
        queue.sort(key=lambda item: item[:3])
        for _, _, _, copy_, node, produced in queue:
            new = self.emit(copy_, node)
            for j in produced:
                self.amap[copy_.region.outputs[j]] = new

    def emit(self, copy_: Copy, node: torch.fx.Node) -> torch.fx.Node:
        def resolve(arg: torch.fx.Node) -> torch.fx.Node:
            if arg not in copy_.env:
                copy_.env[arg] = self.placeholder_for(copy_, arg)
            return copy_.env[arg]

        new = self.graph.create_node(
            "call_function",
            node.target,
            torch.fx.map_arg(node.args, resolve),
            torch.fx.map_arg(node.kwargs, resolve),
            # fx numbers a name by its base: stock's run named the node from the same base.
            name=_SUFFIX.sub("", node.name),
        )
        root = root_name(node)
        new.meta = self.meta_for(copy_, node)
        self.grads(new)
        self.handle_key[new] = (id(copy_), root)
        copy_.env[node] = new
        return new

    def grads(self, new: torch.fx.Node) -> None:
        """A template's activation inputs come in without grad; in the whole program they carry
        it from the parameters upstream. Where an input carries it and the template's value
        does not, the op is run on the fake values to learn whether its result carries it (a
        result never loses grad by more inputs carrying it, so nothing else can change)."""
        value = new.meta.get("val")
        if not any(_requires_grad(a.meta.get("val")) for a in new.all_input_nodes):
            return
        if not _lacks_grad(value):
            return
        args, kwargs = torch.fx.map_arg((new.args, new.kwargs), lambda a: a.meta["val"])
        with self.fake_mode:
            result = new.target(*args, **kwargs)
        _copy_grad(result, value)

    def placeholder_for(self, copy_: Copy, node: torch.fx.Node) -> torch.fx.Node:
        if node.op == "get_attr":
            setattr(self.owner, node.target, _attr(copy_.template.edge.graph_module, node.target))
            new = self.graph.get_attr(node.target)
            new.meta = dict(node.meta)
            return new
        if node.op != "placeholder":
            raise NotLocal(f"{node.name} used before it is made")
        edge = copy_.template.edge.graph_signature
        inputs = copy_.template.region.inputs
        fqn = {**edge.inputs_to_parameters, **edge.inputs_to_buffers}.get(node.name)
        weights = {
            s.arg.name: s.target
            for s in self.program.graph_signature.input_specs
            if s.target is not None
        }
        if fqn is not None and fqn in weights.values():
            [index] = [i for i, n in enumerate(inputs) if weights.get(n.name) == fqn]
        elif node.name in edge.user_inputs:
            users = [
                i for i, n in enumerate(inputs) if n.op != "get_attr" and n.name not in weights
            ]
            index = users[list(edge.user_inputs).index(node.name)]
        else:
            return self.lift(copy_, node)
        new = self.amap[copy_.region.inputs[index]]
        if new.op == "placeholder" and new not in self.placeholder_done:
            self.placeholder_done.add(new)
            new.meta = self.meta_for(copy_, node)
        return self.amap[copy_.region.inputs[index]]

    def meta_for(self, copy_: Copy, node: torch.fx.Node) -> dict[str, Any]:
        """The template node's metadata with the region's own values: each per-layer field is
        looked up among the template region's aten nodes and replaced by the value the region's
        node at the same place holds (the same at every place that holds it, or no copy)."""
        meta = dict(node.meta)
        meta["val"] = self.fake(node.meta.get("val"))
        meta.pop("debug_handle", None)
        if copy_.region is copy_.template.region:
            return meta
        for key in _PER_LAYER_META:
            if key not in meta:
                continue
            own = copy_.values[key].get(_frozen(meta[key]), [])
            if len({_frozen(value) for value in own}) != 1:
                raise NotLocal(f"{node.name}'s {key} maps to {len(own)} values")
            meta[key] = own[0]
        return meta

    def lift(self, copy_: Copy, node: torch.fx.Node) -> torch.fx.Node:
        """A constant the edge passes lifted (ScalarToTensorPass), numbered as stock numbers it:
        after the buffers and the constants lifted before it."""
        edge = copy_.template.edge
        target = edge.graph_signature.inputs_to_buffers.get(node.name)
        if target is None:
            raise NotLocal(f"{node.name} is neither an input nor a lifted constant")
        tensor = edge.state_dict.get(target, edge.constants.get(target))
        name = f"_lifted_tensor_constant{self.buffers + len(self.lifted)}"
        with self.graph.inserting_before(self.first_user):
            new = self.graph.placeholder(name)
        new.meta = self.meta_for(copy_, node)
        new.meta["val"] = self.fake_mode.from_tensor(tensor, static_shapes=True)
        new.meta["val"].constant = tensor
        self.lifted.append((new, tensor))
        return new

    def finish(self) -> None:
        """The output, unused parameters dropped, debug handles numbered as
        DebugHandleGeneratorPass numbers them: by first appearance of a node's first ancestor."""
        [out] = [n for n in self.program.graph.nodes if n.op == "output"]
        new = self.graph.output(torch.fx.map_arg(out.args[0], self.amap.__getitem__))
        new.meta = dict(out.meta)
        values = [v.meta.get("val") for v in new.args[0]]
        new.meta.update(val=tuple(values), tensor_meta=tuple(None for _ in values))
        handles: dict[Any, int] = {}
        params = self.program.graph_signature.inputs_to_parameters
        for node in list(self.graph.nodes):
            if node.op == "placeholder" and not node.users and node.name in params:
                self.graph.erase_node(node)
            elif node.op == "call_function":
                node.meta["debug_handle"] = handles.setdefault(
                    self.handle_key[node], len(handles) + 1
                )


def assembled_program(program: Any, asm: Assembly, config: Any, preserved: list[Any]) -> Any:
    """The ExportedProgram `_generate_edge_program` would make around the assembled graph."""
    from executorch.exir.verification.verifier import EXIREdgeDialectVerifier
    from torch.export import ExportedProgram
    from torch.export.graph_signature import (
        ExportGraphSignature,
        InputKind,
        InputSpec,
        TensorArgument,
    )

    old = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    lifted = {node.name: tensor for node, tensor in asm.lifted}
    specs = []
    for node in asm.graph.nodes:
        if node.op != "placeholder":
            continue
        if node.name in lifted:
            specs.append(InputSpec(InputKind.BUFFER, TensorArgument(node.name), node.name, True))
        else:
            specs.append(copy.deepcopy(old[node.name]))
    [out] = [n for n in asm.graph.nodes if n.op == "output"]
    outputs = []
    for spec, value in zip(program.graph_signature.output_specs, out.args[0], strict=True):
        spec = copy.deepcopy(spec)
        spec.arg = TensorArgument(value.name)
        outputs.append(spec)
    used = {s.target for s in specs if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)}
    state = {k: v for k, v in program.state_dict.items() if k in used}
    state.update(lifted)
    module = torch.fx.GraphModule(asm.owner, asm.graph)
    return ExportedProgram(
        root=module,
        graph=module.graph,
        graph_signature=ExportGraphSignature(specs, outputs),
        state_dict=state,
        range_constraints=program.range_constraints,
        module_call_graph=copy.deepcopy(program.module_call_graph),
        example_inputs=program.example_inputs,
        constants=program.constants,
        verifiers=[
            EXIREdgeDialectVerifier(
                edge_compile_config=config, class_only=True, preserve_ops=preserved
            )
        ],
    )


@dataclass
class RegionalRun:
    """What the last regional edge generation did."""

    regions: int = 0
    templates: int = 0
    template_seconds: float = 0.0
    fallback: str | None = None


LAST = RegionalRun()


def regional_edge_manager(
    partitioner: Any,
    aten_programs: Any,
    config: Any,
    constant_methods: Any,
    generate_etrecord: Any = False,
) -> Any:
    """A drop-in for `_gen_edge_manager_for_partitioners`: edge generation once per distinct
    region structure, the whole edge program assembled from the results."""
    from executorch.exir.program import _program

    global LAST
    LAST = RegionalRun()
    stock = _program.__dict__.get("_stock_gen", _program._gen_edge_manager_for_partitioners)
    if generate_etrecord or constant_methods or list(aten_programs) != ["forward"]:
        LAST.fallback = "not one plain method"
        return stock(partitioner, aten_programs, config, constant_methods, generate_etrecord)
    program = aten_programs["forward"]
    found = regions(program)
    if found is None or len(found) < 3:
        LAST.fallback = "no repeated contiguous layers"
        return stock(partitioner, aten_programs, config, constant_methods, generate_etrecord)
    templates, keys = templates_for(program, found, config, partitioner.get("forward", []))
    LAST.regions, LAST.templates = len(found), len(templates)
    LAST.template_seconds = sum(t.seconds for t in templates.values())
    asm = Assembly(program)
    try:
        asm.build([Copy(templates[k], r) for k, r in zip(keys, found, strict=True)])
        asm.finish()
    except NotLocal as error:
        LAST.fallback = str(error)
        return stock(partitioner, aten_programs, config, constant_methods, generate_etrecord)
    preserved = sorted({op for t in templates.values() for op in t.preserved}, key=str)
    edge = assembled_program(program, asm, config, preserved)
    config._core_aten_ops_exception_list = list(
        set(config._core_aten_ops_exception_list) | set(preserved)
    )
    return _program.EdgeProgramManager({"forward": edge}, constant_methods, config, preserved)


@contextmanager
def regional() -> Iterator[None]:
    from executorch.exir.program import _program

    stock = _program._gen_edge_manager_for_partitioners
    _program._stock_gen = stock  # type: ignore[attr-defined]
    _program._gen_edge_manager_for_partitioners = regional_edge_manager
    try:
        yield
    finally:
        _program._gen_edge_manager_for_partitioners = stock
