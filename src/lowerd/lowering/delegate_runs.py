"""The delegates' fake runs during to_executorch: each delegate structure run once per emission.

`LegalizePortableDimOrderPass` (and `SpecPropPass`, where it retraces) retraces the whole
top-level program through `ExportPass`. At every `executorch_call_delegate` node the retrace runs
the delegate's original program on the call's FakeTensors: torch's `call_delegate_cpu` unlifts
it (`ExportedProgram.module()`, a copy of its graph) and runs that module, op by op, only to
learn the outputs' metadata. On optimum's recipe at L = 8 these runs were ~75 % of the retrace:
the layers' partitions are the same programs with other weights, run on inputs of the same
metadata.

The outputs' metadata is a function of what the run reads, so one run serves every call with
the same: the program's graph (each node's op, target and arguments), its signature, range
constraints, call graph, guards and example inputs' metadata, its placeholders' values and its
lifted tensors' metadata (what `module()` builds its input checks and parameters from), the
call's arguments' metadata (dtype, sizes and strides as expressions of the call's ShapeEnv,
storage offset, device, layout, requires_grad, a FakeTensor's mode and small constant), the
grad and inference modes, and the ShapeEnv the run reads its facts from. Weight values are not
read (the fake mode fakes a real tensor without keeping its values), so two layers' partitions
share a key; a program with an op whose output depends on values (torch's
`data_dependent_output` and `dynamic_output_shape` tags, `.item()`) or that lifts a tensor
(the fake mode keeps a lifted tensor's values) is always run, and so is a call with a value the
key does not spell (run_keys.py, as dtype_checks.py spells its runs). A served call
gets new FakeTensors made as torch's own FakeTensor dispatch cache makes them from an entry
(`_get_output_tensor_from_cache_entry`: `empty_strided` on meta with the guards suppressed):
same dtype, sizes, strides, storage offset, layout, device and requires_grad, which is all a
TensorSpec reads (`TensorSpec.from_tensor`).

A run is kept for the calls after it only when it changed nothing in the ShapeEnv (no guard,
no runtime assertion, no symbol, no range or replacement changed: every question it asked was
answered from facts already there) and its outputs are fresh tensors (no view, no constant, no
storage shared with an input or another output). Within one emission the ShapeEnv's facts only
grow, so a later run of the same program on the same metadata would ask the same questions, get
the same answers, change nothing and make the same outputs. tests/test_partition_speedups.py
compares the bytes with stock's and counts the runs served.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from lowerd.lowering.run_keys import (
    SYMBOLIC,
    Unspelled,
    literal,
    shape_env_state,
    small_constant,
)

# A hashable description of what one run reads; None where it cannot be described.
RunKey = tuple[Any, ...]


@dataclass
class DelegateRuns:
    served: int = 0  # calls answered from an earlier run of the same
    run: int = 0  # calls run: the first of their kind, or not describable
    _outputs: dict[RunKey, tuple[list[Any], Any]] = field(default_factory=dict)
    _programs: dict[int, tuple[Any, RunKey | None]] = field(default_factory=dict)

    @contextmanager
    def installed(self) -> Iterator[DelegateRuns]:
        """torch's call_delegate_cpu served from earlier runs while inside."""
        # the module, not the operator torch._higher_order_ops exports under its name
        module: Any = importlib.import_module("torch._higher_order_ops.executorch_call_delegate")
        real = module.call_delegate_cpu

        def call_delegate_cpu(lowered_module: Any, *args: Any) -> Any:
            # Called inside the fake mode: what the key reads (a constant's bytes) and the
            # outputs remade must not go through it (a constant's values read by a fake mode
            # are new unbacked symbols). torch's own cache makes its outputs so, inside dispatch.
            with _disable_current_modes():
                key = self._key(lowered_module, args)
                kept = self._outputs.get(key) if key is not None else None
                if kept is not None:
                    self.served += 1
                    return _remade(kept)
            self.run += 1
            if key is None:
                return real(lowered_module, *args)
            before = _facts(args)
            out = real(lowered_module, *args)
            if _facts(args) == before:
                kept = _kept(out, args)
                if kept is not None:
                    self._outputs[key] = kept
            return out

        module.call_delegate_cpu = call_delegate_cpu
        try:
            yield self
        finally:
            module.call_delegate_cpu = real

    def _key(self, lowered_module: Any, args: tuple[Any, ...]) -> RunKey | None:
        entry = self._programs.get(id(lowered_module))
        if entry is None or entry[0] is not lowered_module:
            entry = (lowered_module, _program_key(lowered_module.original_module))
            self._programs[id(lowered_module)] = entry  # the module kept: its id stays its own
        if entry[1] is None:
            return None
        try:
            arguments = tuple(_value_key(arg) for arg in args)
            return (entry[1], arguments, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        except Unspelled:
            return None


def _program_key(program: Any) -> RunKey | None:
    """What running program.module() reads of the program, weights' values and every name
    aside (the layers' partitions differ in their inputs' and weights' names); None for a
    program whose outputs may depend on values."""
    try:
        graph = program.graph_module.graph
        places = {node: index for index, node in enumerate(graph.nodes)}
        nodes: list[tuple[Any, ...]] = []
        for node in graph.nodes:
            if node.op == "placeholder":
                nodes.append((node.op, _value_key(node.meta.get("val"))))
                continue
            if node.op not in ("call_function", "output") or _reads_values(node.target):
                return None  # get_attr and call_module name what they read
            target = _target_key(node.target)
            nodes.append(
                (node.op, target, _arg_key(node.args, places), _arg_key(node.kwargs, places))
            )
        return (
            tuple(nodes),
            _signature_key(program),
            repr(program.range_constraints),
            tuple(_call_key(entry) for entry in program.module_call_graph),
            repr(program._guards_code),  # module()'s input checks are made of these
            _example_key(program.example_inputs),
        )
    except Unspelled:
        return None


def _signature_key(program: Any) -> RunKey:
    """The signature with each lifted tensor's metadata in its input's place and each mutated
    buffer by the place of its input: no names."""
    lifted = {**program.state_dict, **program.constants}
    inputs = program.graph_signature.input_specs
    place_of = {spec.target: index for index, spec in enumerate(inputs) if spec.target}
    described: list[Any] = []
    for spec in inputs:
        value = _value_key(lifted[spec.target]) if spec.target in lifted else None
        kind = type(lifted.get(spec.target)).__name__
        described.append((spec.kind.name, type(spec.arg).__name__, spec.persistent, kind, value))
    for spec in program.graph_signature.output_specs:
        target = place_of.get(spec.target) if spec.target else None
        if spec.target and target is None:
            raise Unspelled(spec.target)
        described.append((spec.kind.name, type(spec.arg).__name__, target))
    return tuple(described)


def _call_key(entry: Any) -> RunKey:
    signature = entry.signature
    if signature is None:
        return (entry.fqn, None)
    return (
        entry.fqn,
        str(signature.in_spec),
        str(signature.out_spec),
        len(signature.inputs),
        len(signature.outputs),
        repr(signature.forward_arg_names),
    )


def _example_key(example_inputs: Any) -> Any:
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten(example_inputs)
    return (str(spec), tuple(_value_key(leaf) for leaf in leaves))


def _reads_values(target: Any) -> bool:
    from executorch.exir.dialects.edge._ops import EdgeOpOverload

    aten = torch.ops.aten
    op = target._op if isinstance(target, EdgeOpOverload) else target  # an edge op: its aten op
    if op in (aten._local_scalar_dense.default, aten.item.default):
        return True
    if op in (aten.lift_fresh.default, aten.lift_fresh_copy.default):
        return True  # the fake mode keeps the lifted tensor's values as a constant
    tags = getattr(op, "tags", ())
    return torch.Tag.data_dependent_output in tags or torch.Tag.dynamic_output_shape in tags


def _target_key(target: Any) -> Any:
    if isinstance(target, str):
        return target
    try:
        hash(target)
    except TypeError as error:
        raise Unspelled(repr(target)) from error
    return target  # an op or function object: the same object within this process


def _arg_key(value: Any, places: dict[Any, int]) -> Any:
    if isinstance(value, torch.fx.Node):
        return ("node", places[value])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_arg_key(item, places) for item in value))
    if isinstance(value, dict):
        return ("dict", tuple((key, _arg_key(item, places)) for key, item in value.items()))
    return literal(value)


def _value_key(value: Any) -> Any:
    """A value as a run reads it: a tensor's metadata (sizes and strides as their expressions,
    a FakeTensor's mode and small constant), a symbolic number's expression, a plain value as
    it is."""
    if isinstance(value, torch.Tensor):
        constant = getattr(value, "constant", None)
        return (
            "tensor",
            value.dtype,
            value.layout,
            str(value.device),
            value.requires_grad,
            tuple(_number_key(size) for size in value.shape),
            tuple(_number_key(stride) for stride in value.stride()),
            _number_key(value.storage_offset()),
            id(getattr(value, "fake_mode", None)),  # a FakeTensor's mode, or a real tensor
            small_constant(constant) if constant is not None else None,
        )
    if isinstance(value, SYMBOLIC):
        return _number_key(value)
    return literal(value)


def _number_key(value: Any) -> Any:
    if isinstance(value, SYMBOLIC):
        return ("sym", type(value).__name__, str(value.node.expr), id(value.node.shape_env))
    return literal(value)


def _facts(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What a run could change of the call's ShapeEnv (None without one: nothing to change)."""
    for arg in args:
        fake_mode = getattr(arg, "fake_mode", None)
        if fake_mode is not None:
            return shape_env_state(fake_mode.shape_env)
    return None


def _kept(out: Any, args: tuple[Any, ...]) -> tuple[list[Any], Any] | None:
    """The run's outputs as they can be made again: each a fresh FakeTensor of the call's mode;
    None otherwise."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten(out)
    storages = {_storage(arg) for arg in args if isinstance(arg, FakeTensor)}
    modes = {arg.fake_mode for arg in args if isinstance(arg, FakeTensor)}
    for leaf in leaves:
        if not isinstance(leaf, FakeTensor) or leaf.fake_mode not in modes:
            return None
        if leaf._is_view() or leaf.constant is not None or leaf.is_sparse:
            return None
        if not isinstance(leaf.storage_offset(), int) or leaf.storage_offset() != 0:
            return None
        if leaf.is_conj() or leaf.is_neg():
            return None
        storage = _storage(leaf)
        if storage in storages:
            return None
        storages.add(storage)
    return leaves, spec


def _storage(tensor: Any) -> int:
    """The storage's own address (untyped_storage() makes a new wrapper at each call: the id of
    one can be another's once it is freed)."""
    return int(tensor.untyped_storage()._cdata)


def _remade(kept: tuple[list[Any], Any]) -> Any:
    """New FakeTensors with the kept outputs' metadata, as torch's FakeTensor dispatch cache
    makes an output from its entry."""
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager
    from torch.utils import _pytree as pytree

    leaves, spec = kept
    made = []
    for leaf in leaves:
        mode = leaf.fake_mode
        quiet = mode.shape_env.suppress_guards() if mode.shape_env else nullcontext()
        with in_kernel_invocation_manager(mode), quiet:
            empty = torch.empty_strided(
                leaf.shape,
                leaf.stride(),
                dtype=leaf.dtype,
                layout=leaf.layout,
                device="meta",
                requires_grad=leaf.requires_grad,
            )
        made.append(FakeTensor(mode, empty, leaf.device))
    return pytree.tree_unflatten(made, spec)
