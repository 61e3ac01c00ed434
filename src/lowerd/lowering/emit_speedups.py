"""An exact shortcut through ExecuTorch's to_executorch, installed only while lowerd emits.

`EdgeProgramManager.to_executorch` runs its passes over the whole top-level program, and two of
them retrace it in a row through `ExportPass` (every node run again on FakeTensors, each
delegate's program unlifted and run too): `LegalizePortableDimOrderPass`, then `SpecPropPass`,
whose first step is a plain retrace, `ExportPass()(graph_module)`, before it gives each node its
TensorSpec. On the depth bench's Llama the two retraces were nearly all of to_executorch's own
passes.

`LegalizePortableDimOrderPass` rewrites only the five portable ops it lists whose first input is
not in the default dim order; it inserts a `_to_dim_order_copy` before each. When it inserts
none, it is a plain retrace too, and `SpecPropPass` gets a graph that is the output of a retrace
nothing has changed since. A plain retrace of such a graph gives the same graph back (the
argument of lowering/xnnpack_passes.py: each node rebuilt in order with the same target and
arguments, its whole meta copied, `val` and `tensor_meta` recomputed from the same fake inputs
to equal values; what may differ, node names, the length of `from_node` chains and the generated
code, no later pass of to_executorch nor the emitter reads into the program). So `SpecPropPass`
is run without its retrace: the TensorSpecs are made, by ExecuTorch 1.5.1's own code below, from
the same `val`s. tests/test_partition_speedups.py compares the bytes with stock's.

Inside the retraces that do run, each delegate's fake run is served from an earlier run of the
same program on the same metadata (lowering/delegate_runs.py says when, and why that is exact).

The retrace is skipped only when all of these hold, and runs otherwise:
- the graph module is the one `LegalizePortableDimOrderPass` just returned, with the same nodes
  (it inserted no copy: as many `_to_dim_order_copy` nodes out as in);
- torch and ExecuTorch are the versions this argument was checked against.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lowerd.lowering.delegate_runs import DelegateRuns
from lowerd.lowering.edge_speedups import validated_versions

log = logging.getLogger(__name__)


@dataclass
class EmitSpeedups:
    retraces_skipped: int = 0  # SpecPropPass retraces of a graph just retraced
    # the delegates' fake runs inside the retraces, each structure run once (delegate_runs.py)
    delegate_runs: DelegateRuns = field(default_factory=DelegateRuns)

    @contextmanager
    def installed(self) -> Iterator[EmitSpeedups]:
        """SpecPropPass without its retrace where the graph was just retraced, until exit."""
        if not validated_versions():
            yield self
            return
        from executorch.exir.passes.legalize_portable_dim_order_pass import (
            LegalizePortableDimOrderPass,
        )
        from executorch.exir.passes.spec_prop_pass import SpecPropPass

        retraced: dict[int, tuple[Any, list[Any]]] = {}  # id(module) -> (module, its nodes)
        copy_op = LegalizePortableDimOrderPass._copy_op
        raw_legalize = LegalizePortableDimOrderPass.__call__
        own_legalize = LegalizePortableDimOrderPass.__dict__.get("__call__")  # None: inherited
        raw_spec_prop = SpecPropPass.__dict__["__call__"]

        def legalize(pass_: Any, graph_module: Any) -> Any:
            copies = _count(graph_module, copy_op)
            result = raw_legalize(pass_, graph_module)
            module = result.graph_module
            if module is not graph_module and _count(module, copy_op) == copies:
                retraced[id(module)] = (module, list(module.graph.nodes))
            return result

        def spec_prop(pass_: Any, graph_module: Any) -> Any:
            entry = retraced.pop(id(graph_module), None)
            if entry is None or entry[0] is not graph_module:
                return raw_spec_prop(pass_, graph_module)
            if list(graph_module.graph.nodes) != entry[1]:
                return raw_spec_prop(pass_, graph_module)
            self.retraces_skipped += 1
            return _specs_propagated(graph_module)

        LegalizePortableDimOrderPass.__call__ = legalize
        SpecPropPass.__call__ = spec_prop
        try:
            with self.delegate_runs.installed():
                yield self
            runs = self.delegate_runs
            log.debug(
                "emission: %d retraces skipped; delegate fake runs: %d served, %d run",
                self.retraces_skipped,
                runs.served,
                runs.run,
            )
        finally:
            if own_legalize is None:
                del LegalizePortableDimOrderPass.__call__  # inherited from PassBase again
            else:
                LegalizePortableDimOrderPass.__call__ = own_legalize
            SpecPropPass.__call__ = raw_spec_prop


def emit_speedups() -> Any:
    """EmitSpeedups installed, as a context manager (what emission.emit and the benches use)."""
    return EmitSpeedups().installed()


def _count(graph_module: Any, target: Any) -> int:
    return sum(1 for node in graph_module.graph.nodes if node.target is target)


def _specs_propagated(graph_module: Any) -> Any:
    """SpecPropPass.__call__ of ExecuTorch 1.5.1 after its retrace, on graph_module itself."""
    import torch
    from executorch.exir.delegate import executorch_call_delegate
    from executorch.exir.passes.spec_prop_pass import make_spec
    from torch.fx.passes.infra.pass_base import PassResult
    from torch.utils import _pytree as pytree

    fallback = _llama_fallback()

    def get_spec(x: Any) -> Any:
        return x.meta.get("spec", None) if hasattr(x, "meta") else None

    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            meta_val = node.meta.get("val", None)
            if node.op == "output":
                node.meta["spec"] = pytree.tree_map(get_spec, node.args[0])
            elif node.op == "call_function" and node.target == operator.getitem:
                value_spec = pytree.tree_map(get_spec, node.args[0])
                node.meta["spec"] = value_spec[node.args[1]]
            elif node.op == "call_function" and node.target in (
                executorch_call_delegate,
                fallback,
            ):
                if "spec" not in node.meta:
                    node.meta["spec"] = pytree.tree_map(make_spec, meta_val)
            else:
                node.meta["spec"] = pytree.tree_map(make_spec, meta_val)
    return PassResult(graph_module, True)


def _llama_fallback() -> Any:
    """The op spec_prop_pass names `_llama_fallback_default` (None where it has none)."""
    from executorch.exir.passes import spec_prop_pass

    return getattr(spec_prop_pass, "_llama_fallback_default", None)
