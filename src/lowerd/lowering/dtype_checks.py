"""The edge dialect's dtype check, run once per graph a lowering checks (an exact shortcut,
installed only while lowerd lowers).

`EXIREdgeDialectVerifier.check_additional` ends with
`_check_tensor_args_matching_op_allowed_dtype(gm)`: an fx Interpreter runs the whole graph on
FakeTensors, from its placeholders' `val`s, and checks each edge op's tensor arguments (the
values that run computed) and results (the node's `val`) against the op's dtype constraint. It
raises on a violation and returns None otherwise. ExecuTorch runs it whenever an edge-dialect
ExportedProgram is made or validated: in `to_edge_transform_and_lower` on the same graph three
times (the edge program made, validated again as `to_backend` starts, and the copy
`get_fake_program` makes of it), and once per partition cut out, most partitions of the same
structure as another (a Llama's layers 1..L-1). Each run over the whole graph costs about
half a second at L = 16 (an op dispatched per node).

What the run reads is, per node in order, its op, its target, its arguments (other nodes by
position, literals), its `val` (the placeholders' are the run's inputs, every node's gives its
results' dtypes), and the fake mode the placeholders' vals belong to (the run is inside it, the
python dispatcher enabled). Every value it computes follows from those by the ops' fake kernels,
so its answer does: `DtypeChecks.key` spells them, and a graph whose key equals one that passed
in this lowering passes again, answered without the run. A failed check is not remembered (it
runs, and raises, as ExecuTorch's). Node names, weights' values and stack traces are not read
by a passing run (only a failure's message names them), so two layers' partitions share a key.

A symbolic size is spelled as its expression in the program's backed symbols (`s0`), and so is
a symbolic value (a `sym_size` node's, a symbolic input's: the run computes the former from the
placeholders and takes the latter as its input; a dynamic program's whole graph holds them). With
symbols the run consults the ShapeEnv, which it may change (a guard, a range refined, a fresh
unbacked symbol) and later steps read: a key is remembered only when its run left the ShapeEnv
as it found it (run_keys.py `shape_env_state`). A ShapeEnv only gains facts (ranges narrow,
replacements and guards are added), so what a run found statically known stays known, and a
later run of the key changes nothing either: skipping it skips no change.

Graphs the argument does not cover run as in ExecuTorch: a size holding an unbacked symbol, a
node binding unbacked symbols, a get_attr (a delegate's lowered module, a nested graph: the run
stops at the first delegate call, and what an attribute holds is not spelled), a val that is not
a FakeTensor of the placeholders' mode, one holding a constant of more than 64 elements (the
fake mode may run the real op on a constant: the key spells a small one's bytes), and an
argument of a kind the key does not spell. The key holds the targets, dtypes and fake mode
themselves, so no id in it can be reused while the memo lives (one lowering). Only with the
validated torch and ExecuTorch versions.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from lowerd.lowering.edge_speedups import validated_versions
from lowerd.lowering.run_keys import (
    SYMBOLIC,
    Unspelled,
    literal,
    shape_env_state,
    small_constant,
)


@dataclass
class DtypeChecks:
    """The checks of one lowering: which graphs passed, and how many checks were answered."""

    answered: int = 0  # checks answered by an earlier pass of the same key
    run: int = 0  # checks run (keyed or not)
    passed: set[tuple[Any, ...]] = field(default_factory=set)

    @contextmanager
    def installed(self) -> Iterator[DtypeChecks]:
        if not validated_versions():
            yield self
            return
        from executorch.exir.verification import verifier

        executorch_s = verifier._check_tensor_args_matching_op_allowed_dtype

        def check(graph_module: torch.fx.GraphModule) -> None:
            key = self.key(graph_module)
            if key is not None and key in self.passed:
                self.answered += 1
                return
            self.run += 1
            before = _state(key)
            executorch_s(graph_module)  # raises on a violation: nothing is remembered
            if key is not None and _state(key) == before:
                self.passed.add(key)

        # check_additional looks the function up in its module at each call.
        verifier._check_tensor_args_matching_op_allowed_dtype = check
        try:
            yield self
        finally:
            verifier._check_tensor_args_matching_op_allowed_dtype = executorch_s

    @staticmethod
    def key(graph_module: torch.fx.GraphModule) -> tuple[Any, ...] | None:
        """What the check reads of the graph, or None where the argument does not cover it."""
        try:
            return _key(graph_module)
        except Unspelled:
            return None


def _state(key: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """shape_env_state of the ShapeEnv of the key's fake mode (its first element)."""
    return shape_env_state(key[0].shape_env) if key is not None else None


def _key(graph_module: torch.fx.GraphModule) -> tuple[Any, ...]:
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    nodes = list(graph_module.graph.nodes)
    placeholders = [n.meta.get("val") for n in nodes if n.op == "placeholder"]
    modes = {id(v.fake_mode): v.fake_mode for v in placeholders if isinstance(v, FakeTensor)}
    if len(modes) != 1:
        raise Unspelled("no single fake mode")
    [mode] = modes.values()
    index = {node: i for i, node in enumerate(nodes)}

    def value(v: Any) -> Any:
        if isinstance(v, SYMBOLIC):  # a sym_size node's or a symbolic input's value
            return (type(v).__name__, size(v))
        if isinstance(v, torch.Tensor):
            if not isinstance(v, FakeTensor) or v.fake_mode is not mode:
                raise Unspelled("a value outside the fake mode")
            sizes = tuple(size(s) for s in (*v.shape, *v.stride(), v.storage_offset()))
            kept = small_constant(v.constant) if v.constant is not None else None
            return ("tensor", sizes, v.dim(), v.dtype, v.device, v.layout, v.requires_grad, kept)
        return argument(v)

    def size(s: Any) -> Any:
        if type(s) is int:
            return s
        if not isinstance(s, SYMBOLIC) or s.node.shape_env is not mode.shape_env:
            raise Unspelled("a size of another kind")
        if free_unbacked_symbols(s):
            raise Unspelled("an unbacked size")
        return ("symbol", str(s.node.expr))

    def argument(a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            return ("node", index[a])
        if isinstance(a, (list, tuple)):
            return (type(a).__name__, tuple(value(item) for item in a))
        if isinstance(a, dict):
            return ("dict", tuple((k, value(v)) for k, v in a.items()))
        return literal(a)

    spelled: list[Any] = [mode, torch.is_grad_enabled()]
    for node in nodes:
        if node.op == "get_attr":
            raise Unspelled("a get_attr")
        if node.meta.get("unbacked_bindings"):
            raise Unspelled("unbacked symbols")
        target = node.target if node.op == "call_function" else None
        val = value(node.meta["val"]) if "val" in node.meta else ("no val",)
        spelled.append((node.op, target, argument(node.args), argument(node.kwargs), val))
    return tuple(spelled)
