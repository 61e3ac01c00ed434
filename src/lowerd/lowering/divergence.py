"""The first op of a method whose output differs from eager's: where a divergence starts.

When a verified output is off, the method's lowered program is run again op by op, on the same
inputs, as the .pte computes it before the backends' kernels: each op left on the CPU, and each
op inside a delegate partition (its LoweredBackendModule's original program), in program order.
Each op's value is compared with the value of the eager op it came from (the exported program's
node its `from_node` provenance names), run on the same inputs. The first one out of tolerance is
where the divergence starts: an op a transform pass changed, a decomposition that computes
otherwise. Its partition, its user line and its library line come from the op's own stack trace.

When every op agrees and the outputs still differ, the divergence is the backends' kernels: no
op is named (the runtime's outputs say so by themselves).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lowerd.lowering.runtime_profile import Instruction, op_name
from lowerd.lowering.verify_compare import mismatched_elements
from lowerd.project.backends import backend_by_details_class
from lowerd.project.source_map import UserFiles
from lowerd.project.verification import Divergence, Tolerance


@dataclass(frozen=True)
class OpValue:
    """One op of the lowered program with the value it computed, and its partition (None: the
    CPU)."""

    node: Any
    value: Any
    partition: str | None


def first_divergence(
    exported: Any,
    lowered: Any,
    inputs: tuple[Any, ...],
    tolerance: Tolerance,
    user_files: UserFiles,
) -> Divergence | None:
    """The first op of `lowered` (the method's edge program, delegates in it) whose value is out
    of tolerance against the op of `exported` (its ATen program) it came from; None if none is."""
    eager = _eager_values(exported, inputs)
    diverging = []
    for op in _lowered_values(lowered, inputs):
        origin = _origin(op.node)
        if origin is None or origin not in eager:
            continue
        gap = _gap(op.value, eager[origin], tolerance)
        if gap is not None:
            diverging.append((op, gap, origin))
    if not diverging:
        return None
    op, gap, origin = diverging[0]
    return _located(op, gap, len(diverging), eager[origin].op, user_files)


def first_diverging_partition(
    exported: Any,
    lowered: Any,
    intermediates: Mapping[int, tuple[Any, ...]],
    chain: Sequence[Instruction | None],
    inputs: tuple[Any, ...],
    tolerance: Tolerance,
    user_files: UserFiles,
) -> Divergence | None:
    """The first delegate partition whose outputs on the runtime (its debug buffer, by
    instruction) differ from the eager values of the ops they stand for: where the backend's
    kernels part from eager when every op of the program agrees with it. Named by the op whose
    value its first diverging output is, at that op's line."""
    eager = _eager_values(exported, inputs)
    calls = [n for n in lowered.graph.nodes if _is_delegate_call(n)]
    delegates = [(i, part) for i, part in enumerate(chain) if part and part.kind == "delegate"]
    diverging = []
    for (instruction, part), call in zip(delegates, calls, strict=False):
        # A delegate call logs its arguments, inputs then outputs: the outputs are the last.
        logged = intermediates.get(instruction, ())
        count = len(call.meta["val"]) if isinstance(call.meta.get("val"), list | tuple) else 1
        outputs = logged[len(logged) - count :] if len(logged) >= count else ()
        for getitem in sorted(call.users, key=lambda user: user.args[1] if user.args else 0):
            index, origin = getitem.args[1] if len(getitem.args) > 1 else 0, _root(getitem)
            if origin not in eager or index >= len(outputs):
                continue
            gap = _gap(outputs[index], eager[origin], tolerance)
            if gap is not None:
                diverging.append((part.name, gap, eager[origin]))
                break
    if not diverging:
        return None
    partition, gap, value = diverging[0]
    source = user_files.innermost_in_stack_trace(value.stack_trace)
    library = user_files.innermost_library_frame(value.stack_trace)
    return Divergence(
        value.op,
        partition,
        gap,
        len(diverging),
        user_files.display(source.file) if source else None,
        source.line if source else None,
        library.file if library else None,
        library.line if library else None,
        found_by="partition",
    )


def _is_delegate_call(node: Any) -> bool:
    return getattr(node.target, "__name__", "") == "executorch_call_delegate"


def _located(op: OpValue, gap: float, count: int, origin: str, files: UserFiles) -> Divergence:
    stack = op.node.meta.get("stack_trace")
    source = files.innermost_in_stack_trace(stack)
    library = files.innermost_library_frame(stack)
    name = _op_of(op.node)
    shown = name if name == origin or not origin else f"{name} in place of eager's {origin}"
    return Divergence(
        shown,
        op.partition,
        gap,
        count,
        files.display(source.file) if source else None,
        source.line if source else None,
        library.file if library else None,
        library.line if library else None,
    )


def _eager_values(exported: Any, inputs: tuple[Any, ...]) -> dict[str, Any]:
    """Each op's value in the exported program, by node name, with the eager op's name."""
    import torch

    values: dict[str, Any] = {}
    module = exported.module()

    class Capture(torch.fx.Interpreter):
        def run_node(self, node: Any) -> Any:
            value = super().run_node(node)
            if node.op == "call_function":
                values[node.name] = _EagerValue(value, _op_of(node), node.meta.get("stack_trace"))
            return value

    with torch.no_grad():
        Capture(module).run(*inputs)
    return values


@dataclass(frozen=True)
class _EagerValue:
    value: Any
    op: str
    stack_trace: str | None = None


def _lowered_values(lowered: Any, inputs: tuple[Any, ...]) -> Iterator[OpValue]:
    """Each op of the lowered program in order, a delegate's inner ops in its place."""
    import torch

    found: list[OpValue] = []
    counts: dict[str, int] = {}

    def partition_name(lowered_module: Any) -> str:
        backend = backend_by_details_class(lowered_module.backend_id)
        shown = backend.display if backend else lowered_module.backend_id
        counts[shown] = counts.get(shown, 0) + 1
        return f"{shown} #{counts[shown]}"

    class Capture(torch.fx.Interpreter):
        def __init__(self, module: Any, partition: str | None) -> None:
            super().__init__(module)
            self.partition = partition

        def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
            if getattr(target, "__name__", "") == "executorch_call_delegate":
                inner = args[0]
                name = partition_name(inner)
                return Capture(inner.original_module.module(), name).run(*args[1:])
            return super().call_function(target, args, kwargs)

        def run_node(self, node: Any) -> Any:
            value = super().run_node(node)
            if node.op == "call_function" and _origin(node) is not None:
                found.append(OpValue(node, value, self.partition))
            return value

    with torch.no_grad():
        Capture(lowered.module(), None).run(*inputs)
    return iter(found)


def _origin(node: Any) -> str | None:
    """The exported program's node this one came from: the root of its from_node chain (none
    for a delegate call and the getitems taking its outputs apart)."""
    if getattr(node.target, "__name__", "") in ("getitem", "executorch_call_delegate"):
        return None
    return _root(node)


def _root(node: Any) -> str | None:
    sources = node.meta.get("from_node")
    name = None
    while sources:
        name, sources = sources[-1].name, sources[-1].from_node
    return name


def _op_of(node: Any) -> str:
    """ "aten.hardtanh": the op's namespace and name, without the overload."""
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        return op_name(schema.name)
    return str(getattr(node.target, "__name__", node.target))


def _gap(value: Any, eager: _EagerValue, tolerance: Tolerance) -> float | None:
    """The largest absolute difference when out of tolerance; None when within, or when the
    two are not comparable tensors (another shape, a tuple)."""
    import torch

    want = eager.value
    if not isinstance(value, torch.Tensor) or not isinstance(want, torch.Tensor):
        return None
    if value.shape != want.shape or not want.is_floating_point():
        return None
    difference, mismatched = mismatched_elements(value, want, tolerance)
    if not bool(mismatched.any()):
        return None
    return float(difference.nan_to_num(posinf=0.0).max())
