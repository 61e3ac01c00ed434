"""The whole edge program assembled from its regions' templates (lowering/region_edge.py).

Each region's edge nodes are its template's (the edge program ExecuTorch made of one region of the
same structure, cut out alone: region_cut.py), emitted in the whole program's order with the
region's own inputs and per-node metadata. region_edge.py's docstring says why each field equals
what ExecuTorch's whole-program run makes; anything this assembly cannot copy raises NotLocal, and
the caller runs ExecuTorch's own function instead.
"""

from __future__ import annotations

import copy
import re
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from lowerd.lowering.region_cut import (
    ASSERTION,
    UNBACKED,
    Region,
    attr,
    cut_user_inputs,
    is_check,
    layer_path,
    unbacked_symbols,
    weight_specs,
)
from lowerd.lowering.replay_inputs import Unplaceable, replayed_weights

_SUFFIX = re.compile(r"_\d+$")
# Per-node metadata ExecuTorch copies from the aten node an edge node descends from, and which
# differs between layers: a copy takes its own layer's value.
PER_LAYER_META = ("nn_module_stack", "stack_trace", "torch_fn", "source_fn_stack")
# The pass name a copied node's provenance carries (from_node): it descends from its own layer's
# aten node, as the template's node descends from the template region's.
PROVENANCE = "lowerd regional edge generation"


class _NotOne:
    """What a template's per-layer value maps to in a copy where there is not one value."""

    def __init__(self, count: str) -> None:
        self.count = count

    def __str__(self) -> str:
        return self.count


AMBIGUOUS, MISSING = _NotOne("more than one"), _NotOne("no")


class NotLocal(Exception):
    """The program is not one this assembly can copy exactly."""


@dataclass
class Template:
    """One region's edge program, generated alone."""

    region: Region
    edge: Any  # the region's edge ExportedProgram
    cut_graph: int  # id() of the cut program's graph: the provenance link to the region's nodes
    preserved: list[Any]  # ops the partitioners kept from decomposition
    # A template read back for the region it was made from, whose per-layer metadata are the
    # region's own node for node (template_store.py): its values are kept as they are.
    own_metadata: bool = False


def region_root(node: torch.fx.Node, graph_id: int) -> str | None:
    """The name of the cut region's node `node` descends from (its from_node chain's link in the
    cut graph, followed as DebugHandleGeneratorPass follows it: by the last source)."""
    sources = node.meta.get("from_node")
    while sources:
        source = sources[-1]
        if source.graph_id == graph_id:
            return str(source.name)
        sources = source.from_node
    return None


@dataclass
class Copy:
    """One region's copy of its template."""

    template: Template
    region: Region
    env: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)
    places: dict[str, int] = field(init=False)
    # Per per-layer field: the template's value -> the value this region holds at every place
    # the template holds it, or AMBIGUOUS where it holds more than one there.
    values: dict[str, dict[Any, Any]] = field(init=False)
    # The template's edge symbols (its replays' unbacked ones) -> this copy's own, made fresh.
    symbols: dict[Any, Any] = field(default_factory=dict)
    # The template region's unbacked symbols (export's) -> this region's, at the same place.
    exported: dict[Any, Any] = field(init=False)

    def __post_init__(self) -> None:
        theirs = self.template.region.nodes
        self.places = {node.name: i for i, node in enumerate(theirs)}
        self.values = {}
        for key in PER_LAYER_META:
            found: dict[Any, Any] = {}
            seen: dict[Any, Any] = {}  # the frozen value found, to compare the next one with
            for mine, their in zip(self.region.nodes, theirs, strict=True):
                at, value = _frozen(their.meta.get(key)), mine.meta.get(key)
                if at not in found:
                    found[at], seen[at] = value, _frozen(value)
                elif found[at] is not AMBIGUOUS and seen[at] != _frozen(value):
                    found[at] = AMBIGUOUS
            self.values[key] = found
        theirs_bound, mine_bound = (
            unbacked_symbols(self.template.region),
            unbacked_symbols(self.region),
        )
        if len(theirs_bound) != len(mine_bound):
            raise NotLocal(f"{self.region.key} binds other unbacked symbols than its template")
        self.exported = dict(zip(theirs_bound, mine_bound, strict=True))

    def own_value(self, key: str, template_s: Any, name: str) -> Any:
        """This region's value of the per-layer field `key` where the template's node `name`
        holds `template_s`: the one value the region holds at every place the template holds
        that; NotLocal where it holds none or more than one."""
        own = self.values[key].get(_frozen(template_s), MISSING)
        if isinstance(own, _NotOne):
            raise NotLocal(f"{name}'s {key} maps to {own} values")
        return own

    def own(self, node: torch.fx.Node) -> torch.fx.Node:
        """This region's aten node at the place of the template's aten node the edge node
        `node` descends from."""
        root = region_root(node, self.template.cut_graph)
        place = None if root is None else self.places.get(root)
        if place is None:
            raise NotLocal(f"{node.name} descends from no node of its region")
        return self.region.nodes[place]

    @property
    def is_template(self) -> bool:
        return self.region is self.template.region


def fresh_unbacked(shape_env: Any, value_range: Any, size_like: bool) -> Any:
    """A new unbacked symbol of the ShapeEnv with that range (and size-likeness), bound by the
    node that will hold it, as a replay's `.item()` binds its own."""
    made = shape_env.create_unbacked_symint().node.expr
    shape_env.pending_fresh_unbacked_symbols.remove(made)  # bound by its node, as stock's
    shape_env.var_to_range[made] = value_range
    if size_like:
        shape_env.size_like.add(made)
    return made


def _empty_like_in(mode: Any, value: torch.Tensor) -> Any:
    """A FakeTensor of `mode` with value's shape, stride, dtype, device and requires_grad."""
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    guards = mode.shape_env.suppress_guards if mode.shape_env is not None else nullcontext
    with in_kernel_invocation_manager(mode), guards():
        empty = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return FakeTensor(mode, empty, value.device).requires_grad_(value.requires_grad)


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def program_fake_mode(program: Any) -> Any:
    """A dynamic program's own fake mode (its ShapeEnv holds the symbols and their ranges; the
    replays run in it, so stock's edge values are made in it too), or None for a static one."""
    from torch._guards import detect_fake_mode

    if not program.range_constraints:
        return None
    return detect_fake_mode([n.meta.get("val") for n in program.graph.nodes])


def _expr(size: Any) -> Any:
    return size.node.expr if isinstance(size, torch.SymInt) else None


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


class Assembly:
    """The whole edge graph built from the templates' edge graphs, in the whole program's order."""

    def __init__(self, program: Any):
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.program = program
        self.fake_mode = program_fake_mode(program) or FakeTensorMode()
        self.graph = torch.fx.Graph()
        self.owner = torch.nn.Module()
        self.amap: dict[torch.fx.Node, torch.fx.Node] = {}  # whole aten node -> assembled node
        # The program's placeholder -> the copies reading it, with their template's placeholder.
        self.readers: dict[torch.fx.Node, list[tuple[Copy, torch.fx.Node]]] = {}
        self.emitted_by: dict[torch.fx.Node, Copy] = {}
        self.lifted: list[tuple[torch.fx.Node, torch.Tensor]] = []
        self.buffers = len(program.graph_signature.buffers)
        self.weights = {name: spec.target for name, spec in weight_specs(program).items()}
        self.first_user: torch.fx.Node | None = None
        self.segment: dict[torch.fx.Node, int] = {}
        # A buffer written in place -> its new value; in the order of the buffers' placeholders
        # once finished, as the functionalizing replay orders its mutated inputs.
        self.mutated: dict[str, torch.fx.Node] = {}
        self.renamed: dict[str, str] = {}  # a weight placeholder's replayed name -> the program's
        self._placeholders_and_segments()

    def _placeholders_and_segments(self) -> None:
        """The program's placeholders, and each aten node's segment: the index of the run of
        one region it is in (the rest is split around the layers)."""
        users = set(self.program.graph_signature.user_inputs)
        current: Any = object()
        segments = -1
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                new = self.graph.placeholder(node.name)
                new.meta = dict(node.meta)
                new.meta["val"] = self.fake(node.meta["val"])
                _example_value(node, new.meta)  # a placeholder no copy reads keeps it so too
                self.amap[node] = new
                if node.name in users and self.first_user is None:
                    self.first_user = new
            elif node.op == "call_function":
                key = layer_path(node)
                if key != current:
                    current, segments = key, segments + 1
                self.segment[node] = segments

    def fake(self, value: Any) -> Any:
        """The value remade in the assembly's one fake mode (ExportPass retraces refuse values
        of several modes), with its shape, stride, dtype, device and requires_grad: what
        `torch.empty_strided(...)` inside the mode returns, made as the mode makes it on a hit
        of its dispatch cache (FakeTensorMode._get_output_tensor_from_cache_entry: a meta
        tensor of that metadata, guards suppressed, wrapped for the device), without the
        dispatch and its cache key (7x the cost, a node at a time over the whole program)."""
        if isinstance(value, torch.Tensor):
            return _empty_like_in(self.fake_mode, value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.fake(v) for v in value)
        return value

    def build(self, copies: list[Copy]) -> None:
        """Every copy's edge nodes, in the order stock makes them: by segment of the whole
        program, then region, then the template's order."""
        queue = []
        for order, copy_ in enumerate(copies):
            last = -1
            outputs = self._outputs(copy_)
            for step, node in enumerate(copy_.template.edge.graph.nodes):
                if node.op != "call_function":
                    continue
                segment = self._segment_of(copy_, node)
                if segment < last:
                    raise NotLocal(f"{copy_.region.key}'s edge nodes leave its order")
                last = segment
                queue.append((segment, order, step, copy_, node, outputs.get(node, [])))
        queue.sort(key=lambda item: item[:3])
        for _, _, _, copy_, node, produced in queue:
            new = self.emit(copy_, node)
            for sink in produced:
                if isinstance(sink, str):
                    self.mutated[sink] = new
                else:
                    self.amap[copy_.region.outputs[sink]] = new

    def _outputs(self, copy_: Copy) -> dict[torch.fx.Node, list[int | str]]:
        """What each of the template's outputs is in this region: the region's output j (its
        USER_OUTPUTs, in order), or the new value of this region's buffer (a BUFFER_MUTATION of
        the template region's buffer at the same input place)."""
        edge = copy_.template.edge
        [out] = [n for n in edge.graph.nodes if n.op == "output"]
        outputs: dict[torch.fx.Node, list[int | str]] = {}
        users = 0
        for spec, produced in zip(edge.graph_signature.output_specs, out.args[0], strict=True):
            if produced.op != "call_function":
                raise NotLocal(f"output {produced.name} of {copy_.region.key} is an input")
            if spec.kind.name == "USER_OUTPUT":
                outputs.setdefault(produced, []).append(users)
                users += 1
            elif spec.kind.name == "BUFFER_MUTATION":
                outputs.setdefault(produced, []).append(self._own_buffer(copy_, spec.target))
            else:
                raise NotLocal(f"a {spec.kind.name} output of {copy_.region.key}")
        for sinks in outputs.values():
            if len(sinks) > 1 and any(isinstance(sink, str) for sink in sinks):
                raise NotLocal(f"a buffer's new value is another output of {copy_.region.key}")
        return outputs

    def _own_buffer(self, copy_: Copy, theirs: str) -> str:
        """This region's buffer at the input place of the template region's buffer `theirs`."""
        inputs = copy_.template.region.inputs
        places = [i for i, n in enumerate(inputs) if self.weights.get(n.name) == theirs]
        if len(places) != 1:
            raise NotLocal(f"{copy_.region.key} writes {theirs}, none of its inputs")
        return str(self.weights[copy_.region.inputs[places[0]].name])

    def _segment_of(self, copy_: Copy, node: torch.fx.Node) -> int:
        """The segment of the whole program a template's edge node is emitted in: its region
        node's, or, for a node the replays made from no node of its cut, (a) the rest's binding
        of an input's symbolic size: the first segment, which must be the rest's (the replays'
        insert_deferred_runtime_asserts binds each input symbol right after the placeholders,
        before every other node, in stock's graph as in the rest's template); (b) a layer's
        runtime assertion (a check, its comparison, the arithmetic of its expression) or a sym
        op of the rest a decomposition computed: its neighbours' in the template, which must
        agree."""
        if self._has_root(copy_, node):
            return self.segment[copy_.own(node)]
        if copy_.region.key is not None:
            if not is_check(node):  # a layer's runtime assertions alone: argued
                copy_.own(node)  # raises NotLocal
            self._check_operands(copy_, node)
        elif not isinstance(node.meta.get("val"), torch.SymInt):  # only sym nodes: argued
            copy_.own(node)  # raises NotLocal
        elif node.target is torch.ops.aten.sym_size.int:
            if not self._binds_size(copy_, node):
                raise NotLocal(f"{node.name} binds a size stock's program does not bind")
            if self.segment[copy_.region.nodes[0]] != 0:
                raise NotLocal(f"{node.name} binds a size before the first layer's nodes")
            return 0
        nodes = [n for n in node.graph.nodes if n.op == "call_function"]
        at = nodes.index(node)
        before = [n for n in reversed(nodes[:at]) if self._has_root(copy_, n)][:1]
        after = [n for n in nodes[at + 1 :] if self._has_root(copy_, n)][:1]
        segments = {self.segment[copy_.own(n)] for n in before + after}
        if len(segments) != 1:
            raise NotLocal(f"{node.name} descends from no node of its region")
        return segments.pop()

    def _check_operands(self, copy_: Copy, node: torch.fx.Node) -> None:
        """A layer's runtime assertion the replays made computes its expression from the
        layer's own unbacked values and input symbols, as stock's does: the replays' sympy
        interpreter reuses any node of the graph already holding a subexpression, and one
        holding no unbacked symbol of the layer (`2*s0`) may be another region's node in
        stock's graph, a node of its own in the template's. So each operand holds an unbacked
        symbol (of this layer: region_edge's gate), or is a symbol bound as a cut input, or a
        constant."""
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        for arg in node.all_input_nodes:
            value = arg.meta.get("val")
            if free_unbacked_symbols(value):
                continue
            bare = isinstance(value, torch.SymInt) and value.node.expr.is_Symbol
            if arg.op != "placeholder" or not bare:
                raise NotLocal(f"{node.name} of {copy_.region.key} reads {arg.name}, {value}")

    def _has_root(self, copy_: Copy, node: torch.fx.Node) -> bool:
        return region_root(node, copy_.template.cut_graph) in copy_.places

    def _binds_size(self, copy_: Copy, node: torch.fx.Node) -> bool:
        """Whether the rest's `sym_size` of an input binds the symbol as stock's does: the
        replays' insert_deferred_runtime_asserts binds each input symbol after the placeholders
        at the first placeholder carrying it, at the first size holding it."""
        tensor, dim = node.args
        if not isinstance(tensor, torch.fx.Node) or tensor.op != "placeholder":
            return False
        index = self._input_index(copy_, tensor)
        value = node.meta.get("val")
        if index is None or not isinstance(value, torch.SymInt):
            return False
        return self._binder(value) == (copy_.region.inputs[index], dim)

    def _binder(self, size: torch.SymInt) -> tuple[torch.fx.Node, int] | None:
        """The program placeholder and dimension a replay binds the symbolic size to."""
        expr = size.node.expr
        for node in self.program.graph.nodes:
            value = node.meta.get("val")
            if node.op != "placeholder" or not isinstance(value, torch.Tensor):
                continue
            shape = [_expr(d) for d in value.shape]
            if expr in shape:
                return node, shape.index(expr)
            if expr in [_expr(d) for d in value.stride()]:
                return None
        return None

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
        new.meta = self.meta_for(copy_, node)
        if not copy_.is_template:
            if self._has_root(copy_, node):
                new.meta["from_node"] = [_source(copy_.own(node))]
            else:
                # A runtime assertion the replays made (no node of the cut's is its root): its
                # own root, a debug handle of its own, as each of stock's has.
                new.meta.pop("from_node", None)
                new.meta["from_node"] = [_source(new)]
            self.own_symbols(copy_, new)
        self.grads(new)
        copy_.env[node] = new
        self.emitted_by[new] = copy_
        return new

    def own_symbols(self, copy_: Copy, new: torch.fx.Node) -> None:
        """A copy's node with the copy's own unbacked symbols: each of the template's symbols
        (its replays' fresh ones, in its values and `unbacked_bindings`) made afresh once per
        copy with the template symbol's range, as each `.item()` of stock's has its own; an
        assertion's message names this region's symbol of export where the template's names
        the template region's (region_edge.py's argument)."""
        value = new.meta.get("val")
        if isinstance(value, (torch.SymInt, torch.SymBool)):
            new.meta["val"] = self._renamed(copy_, value)
        if bindings := new.meta.get("unbacked_bindings"):
            new.meta["unbacked_bindings"] = {
                self._own_symbol(copy_, symbol): path for symbol, path in bindings.items()
            }
        if new.target is torch.ops.aten._assert_scalar.default and len(new.args) == 2:
            new.args = (new.args[0], self._own_message(copy_, new.args[1]))

    def _renamed(self, copy_: Copy, value: Any) -> Any:
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        expr = value.node.expr
        names = {s: self._own_symbol(copy_, s) for s in free_unbacked_symbols(value)}
        if not names:
            return value
        shape_env = value.node.shape_env
        renamed = expr.xreplace(names)
        if isinstance(value, torch.SymBool):
            return shape_env.create_symboolnode(renamed)
        return shape_env.create_symintnode(renamed, hint=None)

    def _own_symbol(self, copy_: Copy, symbol: Any) -> Any:
        if symbol in copy_.symbols:
            return copy_.symbols[symbol]
        shape_env = self.fake_mode.shape_env
        if shape_env is None or symbol not in shape_env.var_to_range:
            raise NotLocal(f"{symbol} is not a symbol of the program's ShapeEnv")
        made = fresh_unbacked(
            shape_env, shape_env.var_to_range[symbol], symbol in shape_env.size_like
        )
        copy_.symbols[symbol] = made
        return made

    def _own_message(self, copy_: Copy, message: Any) -> Any:
        found = ASSERTION.match(message) if isinstance(message, str) else None
        if found is None:
            raise NotLocal(f"an assertion of {copy_.region.key} says {message!r}")
        names = {str(theirs): str(mine) for theirs, mine in copy_.exported.items()}
        expression = UNBACKED.sub(lambda m: names.get(m.group(0), m.group(0)), found.group(1))
        return f"Runtime assertion failed for expression {expression} on node '{found.group(2)}'"

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
            result = new.target(*args, **kwargs)  # type: ignore[operator]
        _copy_grad(result, value)

    def placeholder_for(self, copy_: Copy, node: torch.fx.Node) -> torch.fx.Node:
        """The assembled node a template's placeholder stands for in this region: the region's
        parameter, buffer or input, or a constant the edge passes lifted."""
        if node.op == "get_attr":
            target = str(node.target)
            setattr(self.owner, target, attr(copy_.template.edge.graph_module, target))
            new = self.graph.get_attr(target)
            new.meta = dict(node.meta)
            return new
        if node.op != "placeholder":
            raise NotLocal(f"{node.name} used before it is made")
        index = self._input_index(copy_, node)
        if index is None:
            return self.lift(copy_, node)
        new = self.amap[copy_.region.inputs[index]]
        if new.op == "placeholder":
            if new not in self.readers:  # its edge metadata, as stock makes it (and grads reads)
                self.placeholder_from(copy_, node, new)
            self.readers.setdefault(new, []).append((copy_, node))
        return new

    def placeholder_meta(self) -> None:
        """Each placeholder a copy reads gets the edge placeholder's metadata, as stock makes it:
        the replays give a weight the `_COPY_META_FIELDS` (source_fn_stack, torch_fn, ...) of
        its last user in the graph (torch._export.utils._collect_param_buffer_metadata), so a
        weight several regions read takes them from the template of the region holding its
        last user, which in that region's cut is its last user too (the first reader's were set
        while emitting, for `grads`)."""
        order = {node: i for i, node in enumerate(self.graph.nodes)}
        for new, reads in self.readers.items():
            users = [user for user in new.users if user in self.emitted_by]
            copy_ = self.emitted_by[max(users, key=order.__getitem__)]
            if copy_ is reads[0][0]:
                continue  # the first reader's, already
            [node] = [theirs for reader, theirs in reads if reader is copy_]
            self.placeholder_from(copy_, node, new)

    def placeholder_from(self, copy_: Copy, node: torch.fx.Node, new: torch.fx.Node) -> None:
        """The program's placeholder `new` gets the copy's template placeholder's edge metadata,
        with its own weight's desc and provenance."""
        new.meta = self.meta_for(copy_, node)  # the edge placeholder's, as stock makes it
        self.own_desc(copy_, node, new)
        if "from_node" in new.meta and not copy_.is_template:
            # A buffer written in place: the replays make its placeholder descend from the
            # write (the copy_ back into it, replaced), so from this region's own write.
            new.meta["from_node"] = [_source(copy_.own(node))]

    def own_desc(self, copy_: Copy, node: torch.fx.Node, new: torch.fx.Node) -> None:
        """A weight placeholder's `desc` names its weight (ParamAOTInput/BufferAOTInput(target=
        fqn), made by the replays from the input spec): the template's names the template
        region's weight, stock's this region's. partition_key.py keys it, so a copy left with
        the template's would change its partitions' keys whenever the template changes."""
        from torch._functorch._aot_autograd.descriptors import BufferAOTInput, ParamAOTInput

        desc = new.meta.get("desc")
        if not isinstance(desc, ParamAOTInput | BufferAOTInput):
            return
        edge = copy_.template.edge.graph_signature
        theirs = {**edge.inputs_to_parameters, **edge.inputs_to_buffers}.get(node.name)
        if desc.target != theirs or new.name not in self.weights:
            raise NotLocal(f"{node.name}'s desc names {desc.target}, its spec {theirs}")
        new.meta["desc"] = type(desc)(target=self.weights[new.name])

    def _input_index(self, copy_: Copy, node: torch.fx.Node) -> int | None:
        """Which of the region's inputs a template placeholder is; None for a lifted constant."""
        edge = copy_.template.edge.graph_signature
        inputs = copy_.template.region.inputs
        fqn = {**edge.inputs_to_parameters, **edge.inputs_to_buffers}.get(node.name)
        if fqn is not None and fqn in self.weights.values():
            [index] = [i for i, n in enumerate(inputs) if self.weights.get(n.name) == fqn]
            return index
        if node.name in edge.user_inputs:
            users = cut_user_inputs(copy_.template.region, self.weights)
            return inputs.index(users[list(edge.user_inputs).index(node.name)])
        return None

    def meta_for(self, copy_: Copy, node: torch.fx.Node) -> dict[str, Any]:
        """The template node's metadata with the region's own values: each per-layer field is
        looked up among the template region's aten nodes and replaced by the value the region's
        node at the same place holds (the same at every place that holds it, or no copy)."""
        meta = dict(node.meta)
        meta["val"] = self.fake(node.meta.get("val"))
        meta.pop("debug_handle", None)
        _example_value(node, meta)
        if copy_.is_template or copy_.template.own_metadata:
            return meta
        for key in PER_LAYER_META:
            if key not in meta:
                continue
            meta[key] = copy_.own_value(key, meta[key], node.name)
        return meta

    def lift(self, copy_: Copy, node: torch.fx.Node) -> torch.fx.Node:
        """A constant the edge passes lifted (ScalarToTensorPass), numbered as stock numbers it:
        after the buffers and the constants lifted before it."""
        edge = copy_.template.edge
        target = edge.graph_signature.inputs_to_buffers.get(node.name)
        if target is None or self.first_user is None:
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

    def _weights_as_replayed(self) -> None:
        """The weight placeholders in the order and with the names the replays give them
        (replay_inputs.py: a strict export's may differ from the program's); `renamed` maps
        each new name to the program's."""
        try:
            replayed = replayed_weights(self.program.graph_signature.input_specs)
        except Unplaceable as why:
            raise NotLocal(str(why)) from why
        placed = {node.name: node for node in self.graph.nodes if node.op == "placeholder"}
        weights = [(placed[old], new) for old, new in replayed if old in placed]
        if all(node.name == new for node, new in weights):
            # Named as the replays name them (a non-strict export's): the replays keep such a
            # program's order, which the model above does not reproduce for tied weights.
            return
        anchor = next((n for n in self.graph.nodes if n.name not in self.weights), None)
        if anchor is None:
            raise NotLocal("a program of weights alone")
        for node, _ in weights:
            anchor.prepend(node)
        for node, new in weights:
            if node.name != new:
                old = node.name
                node._rename(new)
                node.target = node.name
                if node.name != new:
                    raise NotLocal(f"{new} is taken: the replays would name {old} otherwise")
                self.renamed[new] = old

    def finish(self) -> torch.fx.GraphModule:
        """The output, unused parameters dropped, and debug handles numbered by ExecuTorch's own
        DebugHandleGeneratorPass (each node's greatest ancestor is its own region's aten node's,
        as in stock's run)."""
        from executorch.exir.passes.debug_handle_generator_pass import DebugHandleGeneratorPass

        self.placeholder_meta()
        params = self.program.graph_signature.inputs_to_parameters
        for node in list(self.graph.nodes):
            if node.op == "placeholder" and not node.users and node.name in params:
                self.graph.erase_node(node)
        self._weights_as_replayed()
        [out] = [n for n in self.program.graph.nodes if n.op == "output"]
        buffers = self.program.graph_signature.inputs_to_buffers
        names = [self.renamed.get(node.name, node.name) for node in self.graph.nodes]
        order = [buffers[name] for name in names if buffers.get(name) in self.mutated]
        self.mutated = {fqn: self.mutated[fqn] for fqn in order}
        users = torch.fx.map_arg(out.args[0], self.amap.__getitem__)
        new = self.graph.output((*self.mutated.values(), *users))
        new.meta = dict(out.meta)
        values = [v.meta.get("val") for v in new.args[0]]
        new.meta.update(val=tuple(values), tensor_meta=tuple(None for _ in values))
        module = torch.fx.GraphModule(self.owner, self.graph)
        DebugHandleGeneratorPass()(module)
        return module


def _user_desc(node: torch.fx.Node, index: int) -> None:
    """A user input's `desc` is PlainAOTInput(idx) of its place among the flat user inputs the
    replays call the unlifted module with (aot_autograd's PlainAOTInput(i) after the weights'
    descriptors): the program's user inputs in its signature's order, each a placeholder.
    The template's numbers its cut's inputs (a layer's SymInt input first: one more), and
    partition_key.py keys it, as a partition's input placeholder's."""
    from torch._functorch._aot_autograd.descriptors import PlainAOTInput

    if isinstance(node.meta.get("desc"), PlainAOTInput):
        node.meta = {**node.meta, "desc": PlainAOTInput(idx=index)}  # not the template's dict


def _example_value(node: torch.fx.Node, meta: dict[str, Any]) -> None:
    """Strict export's `example_value` on a weight placeholder is the object its `val` is (the
    replays keep both from the unlifted module's get_attr): the remade val is it too."""
    if "example_value" not in meta:
        return
    if node.meta["example_value"] is not node.meta.get("val"):
        raise NotLocal(f"{node.name}'s example_value is not its val")
    meta["example_value"] = meta["val"]


def _source(node: torch.fx.Node) -> Any:
    from torch.fx.traceback import NodeSource, NodeSourceAction

    return NodeSource(node, PROVENANCE, NodeSourceAction.CREATE)


def assembled_program(
    program: Any, module: torch.fx.GraphModule, asm: Assembly, verifiers: list[Any]
) -> Any:
    """The ExportedProgram `_generate_edge_program` would make around the assembled graph.

    Its range constraints are `_get_updated_range_constraints` of the assembled graph, as
    stock's: `_generate_edge_program` ends with `_transform(edge_program, *post_op_replace_passes)`,
    whose DebugHandleGeneratorPass always reports a change, so ExportedProgramPassManager sets
    them from the graph's ShapeEnv (its var_to_range, keyed past replacements). The ShapeEnv is
    the program's own, where the templates ran (region_edge.py): its backed symbols' entries
    (`s0: [2, N]`, export's `[1, N]`) and export's unbacked symbols' are stock's; the replays'
    fresh unbacked symbols are numbered as fewer replays made them, so those entries differ
    from stock's in name and number (tests/test_region_llm.py), read by no byte; partition keys
    hold only their own graph's symbols (partition_key._encode_own_ranges). A static program's
    ShapeEnv holds only unbacked symbols, if any: the same argument."""
    from executorch.exir._program_utils import _get_updated_range_constraints
    from torch.export import ExportedProgram
    from torch.export.graph_signature import (
        ExportGraphSignature,
        InputKind,
        InputSpec,
        OutputKind,
        OutputSpec,
        TensorArgument,
    )

    old = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    lifted = {node.name: tensor for node, tensor in asm.lifted}
    users = [
        s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT
    ]
    specs = []
    for node in module.graph.nodes:
        if node.op != "placeholder":
            continue
        if node.name in lifted:
            specs.append(InputSpec(InputKind.BUFFER, TensorArgument(node.name), node.name, True))
        else:
            spec = copy.deepcopy(old[asm.renamed.get(node.name, node.name)])
            spec.arg = TensorArgument(node.name)
            specs.append(spec)
            if spec.kind == InputKind.USER_INPUT:
                _user_desc(node, users.index(asm.renamed.get(node.name, node.name)))
    [out] = [n for n in module.graph.nodes if n.op == "output"]
    outputs = [
        OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(value.name), fqn)
        for fqn, value in asm.mutated.items()
    ]
    users = out.args[0][len(outputs) :]
    for spec, value in zip(program.graph_signature.output_specs, users, strict=True):
        spec = copy.deepcopy(spec)
        spec.arg = TensorArgument(value.name)
        outputs.append(spec)
    used = {s.target for s in specs if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)}
    state = {k: v for k, v in program.state_dict.items() if k in used}
    state.update(lifted)
    return ExportedProgram(
        root=module,
        graph=module.graph,
        graph_signature=ExportGraphSignature(specs, outputs),
        state_dict=state,
        range_constraints=_get_updated_range_constraints(module),
        module_call_graph=copy.deepcopy(program.module_call_graph),
        example_inputs=program.example_inputs,
        constants=program.constants,
        verifiers=verifiers,
    )
