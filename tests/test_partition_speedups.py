"""ExecuTorch's partitioning and emission with lowerd's shortcuts (lowering/partition_speedups.py,
emit_speedups.py, dtype_checks.py) give stock's partitions and bytes.

Stock here is tests/stock.py: a plain ExecuTorch run with nothing of lowerd's installed.
"""

from __future__ import annotations

from typing import Any

import pytest

from lowerd.lowering import partition_speedups
from lowerd.lowering.dtype_checks import DtypeChecks
from lowerd.lowering.emit_speedups import EmitSpeedups
from lowerd.lowering.merge_checks import MergeChecks
from lowerd.lowering.partition_speedups import PartitionSpeedups

from stock import PROJECTS, call_entry, sha256

LLAMA = PROJECTS / "llama"
ENTRY = "models/llama.py:make"


def graph_state(graph_module: Any) -> dict[str, Any]:
    """What a legalized graph is to ExecuTorch, by names: each node in order with its
    arguments, users and inputs in their order and its metadata's keys; the names the graph's
    namespace has given out and its counts per base name (the next node's name); the side
    table of find_nodes; the tracer fields; and that node comparison follows the order."""
    from torch.fx.node import map_arg

    graph = graph_module.graph
    nodes = list(graph.nodes)

    def named(value: Any) -> Any:
        return map_arg(value, lambda node: f"%{node.name}")

    namespace = graph._graph_namespace
    return {
        "nodes": [
            (n.name, n.op, str(n.target), named(n.args), named(n.kwargs), n.type, n._repr_fn)
            + ([u.name for u in n.users], [i.name for i in n._input_nodes], sorted(n.meta))
            for n in nodes
        ],
        "names": sorted(namespace._used_names),
        "counts": dict(namespace._base_count),
        "named": sorted((node.name, name) for node, name in namespace._obj_to_name.items()),
        "table": {
            str(key): [n.name for n in found]
            for key, found in graph._find_nodes_lookup_table.table.items()
            if found
        },
        "fields": (graph._tracer_cls, graph._tracer_extras, graph._co_fields, graph._len),
        "sorted": sorted(nodes) == nodes,
        "owned": graph.owning_module is graph_module,
    }


def test_a_llama_partitioned_with_the_shortcuts_is_stock_s_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every merge check answers as ExecuTorch's own, and the partitions are cut out with one
    recompile and no copy of the graph, which is after each cut as torch's legalize_graph
    leaves it in a stock run: the .pte is stock's."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import lowered_backend_module
    from executorch.exir.backend.canonical_partitioners.group_partitioner import (
        GroupBasedPartitioner,
    )

    from lowerd.lowering import graph_legalize

    from testkit.stock_lowering import lower_stock

    stock_states: list[dict[str, Any]] = []
    torch_s = lowered_backend_module.legalize_graph

    def legalize_recorded(graph_module: Any) -> Any:
        legalized = torch_s(graph_module)
        stock_states.append(graph_state(legalized))
        return legalized

    with monkeypatch.context() as stock_run:
        stock_run.setattr(lowered_backend_module, "legalize_graph", legalize_recorded)
        _, stock = lower_stock(call_entry(LLAMA, ENTRY), [XnnpackPartitioner()])

    in_place_states: list[dict[str, Any]] = []
    lowerd_s = graph_legalize.legalize_in_place

    def in_place_recorded(graph_module: Any, prioritized: Any) -> bool:
        done = lowerd_s(graph_module, prioritized)
        in_place_states.append(graph_state(graph_module))
        return done

    monkeypatch.setattr(graph_legalize, "legalize_in_place", in_place_recorded)
    executorch_s = GroupBasedPartitioner._can_merge_partitions
    ours = MergeChecks.can_merge
    answers: list[tuple[bool, bool]] = []
    viewers_exact: set[bool] = set()

    def both(checks: MergeChecks, p1: Any, p2: Any) -> bool:
        answer = ours(checks, p1, p2)
        theirs = executorch_s(checks.partitioner, p1, p2, checks.partitions_by_id)
        answers.append((answer, theirs))
        viewers_exact.add(checks.viewer_exact)
        return answer

    monkeypatch.setattr(MergeChecks, "can_merge", both)
    speedups, emission, checks = PartitionSpeedups(), EmitSpeedups(), DtypeChecks()
    with speedups.installed(), emission.installed(), checks.installed():
        edge, buffer = lower_stock(call_entry(LLAMA, ENTRY), [XnnpackPartitioner()])

    assert sha256(buffer) == sha256(stock)
    assert answers and all(mine == theirs for mine, theirs in answers)
    assert {mine for mine, _ in answers} == {True, False}  # both branches were asked
    assert speedups.merge_checks == len(answers)
    assert viewers_exact == {True}  # validate_partition's search was answered by the viewer
    delegates = [n for n in edge.exported_program().graph.nodes if n.op == "get_attr"]
    assert speedups.recompiles_held == len(delegates) > 1
    assert speedups.legalized_in_place == len(delegates)
    assert in_place_states == stock_states
    # the edge program's checks at to_backend and of its fake copy, and the partitions'
    # of one structure with another's, answered without a run
    assert checks.answered >= 2 + 1
    assert emission.retraces_skipped == 1  # SpecPropPass's, after the dim order's plain retrace
    # the dim order's retrace ran each delegate structure once and served the other calls
    runs = emission.delegate_runs
    assert runs.served > 0 and runs.run > 0
    assert runs.served + runs.run == len(delegates)
    # ExecuTorch's functions are back once it is uninstalled.
    assert GroupBasedPartitioner._can_merge_partitions is executorch_s


def test_merge_checks_search_the_graph_when_it_changed_after_the_viewer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A graph edited after the partitioner's dependency viewer was built: the viewer misses the
    new edge, and the merge checks fall back to validate_partition's search, as ExecuTorch's
    do: merging the two adds would make a cycle through the relu."""
    import operator

    import torch
    from executorch.exir.backend.canonical_partitioners.group_partitioner import (
        GroupBasedPartitioner,
    )
    from torch.fx.passes.operator_support import OperatorSupportBase

    class Adds(OperatorSupportBase):
        def is_node_supported(self, submodules: Any, node: Any) -> bool:
            return node.op == "call_function" and node.target is operator.add

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x + 1
        r = torch.relu(a)
        c = x + 2
        return r, c

    graph_module = torch.fx.symbolic_trace(f)
    executorch_s = GroupBasedPartitioner._can_merge_partitions
    answers: list[tuple[bool, bool, bool]] = []
    ours = MergeChecks.can_merge

    def both(checks: MergeChecks, p1: Any, p2: Any) -> bool:
        answer = ours(checks, p1, p2)
        theirs = executorch_s(checks.partitioner, p1, p2, checks.partitions_by_id)
        answers.append((answer, theirs, checks.viewer_exact))
        return answer

    monkeypatch.setattr(MergeChecks, "can_merge", both)
    with PartitionSpeedups().installed():
        partitioner = GroupBasedPartitioner(graph_module, Adds(), allows_single_node_partition=True)
        [_, _, relu, c, _] = graph_module.graph.nodes
        c.args = (relu, 2)  # after the viewer: c now depends on the relu
        partitions = partitioner.propose_partitions()
    assert answers == [(False, False, False)]
    assert sorted(len(p.nodes) for p in partitions) == [1, 1]


def test_other_versions_run_executorch_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from executorch.exir import lowered_backend_module
    from executorch.exir.backend.canonical_partitioners.group_partitioner import (
        GroupBasedPartitioner,
    )

    monkeypatch.setattr(partition_speedups, "validated_versions", lambda: False)
    before = (GroupBasedPartitioner._can_merge_partitions, lowered_backend_module.legalize_graph)
    with PartitionSpeedups().installed():
        during = (
            GroupBasedPartitioner._can_merge_partitions,
            lowered_backend_module.legalize_graph,
        )
    assert during == before


def test_emission_shortcut_puts_executorch_back_even_nested(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from executorch.exir.passes.legalize_portable_dim_order_pass import (
        LegalizePortableDimOrderPass,
    )
    from executorch.exir.passes.spec_prop_pass import SpecPropPass

    from lowerd.lowering import emit_speedups

    before = (LegalizePortableDimOrderPass.__call__, SpecPropPass.__call__)
    with EmitSpeedups().installed(), EmitSpeedups().installed():
        assert SpecPropPass.__call__ is not before[1]
    assert (LegalizePortableDimOrderPass.__call__, SpecPropPass.__call__) == before
    assert "__call__" not in LegalizePortableDimOrderPass.__dict__  # inherited, as it was

    monkeypatch.setattr(emit_speedups, "validated_versions", lambda: False)
    with EmitSpeedups().installed():
        assert (LegalizePortableDimOrderPass.__call__, SpecPropPass.__call__) == before


def test_dtype_checks_answer_a_graph_that_passed_and_run_every_other() -> None:
    """The edge dialect's dtype check is answered for a graph whose key passed before in the
    lowering; a graph changed since (one node's dtype: a violation) is checked, and raises,
    every time; a dynamic size or symbolic value is spelled by its symbol, an unbacked one not
    (always checked)."""
    import torch
    from executorch.exir import to_edge
    from executorch.exir.verification.verifier import SpecViolationError

    from lowerd.lowering.dtype_checks import DtypeChecks

    class Scaled(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x + 1.0) * 2.0

    from executorch.exir.verification import verifier

    executorch_s = verifier._check_tensor_args_matching_op_allowed_dtype
    x = torch.randn(3, 4)
    checks = DtypeChecks()
    with checks.installed():
        program = to_edge(torch.export.export(Scaled(), (x,))).exported_program()
        before = (checks.run, checks.answered)
        program._validate()
        program._validate()
        assert (checks.run, checks.answered) == (before[0], before[1] + 2)

        [add] = [n for n in program.graph.nodes if "add" in str(n.target)]
        add.meta["val"] = add.meta["val"].to(torch.int32)  # an add of floats giving ints
        for _ in range(2):
            with pytest.raises(SpecViolationError, match="mismatched dtypes"):
                program._validate()
        assert checks.answered == before[1] + 2

        # A dynamic size is spelled by its symbol; the check left the ShapeEnv as it was.
        dim = torch.export.Dim("rows", min=2, max=8)
        exported = torch.export.export(Scaled(), (x,), dynamic_shapes=({0: dim},))
        dynamic = to_edge(exported).exported_program()
        key = DtypeChecks.key(dynamic.graph_module)
        assert key is not None and "('symbol', 's" in str(key)
        answered = checks.answered
        dynamic._validate()
        assert checks.answered == answered + 1

        # So is a symbolic value: a sym_size node's (a dynamic Llama's whole graph holds them).
        class Ranged(torch.nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x + torch.arange(x.shape[0], dtype=x.dtype).unsqueeze(1)

        exported = torch.export.export(Ranged(), (x,), dynamic_shapes=({0: dim},))
        ranged = to_edge(exported).exported_program()
        sizes = [n for n in ranged.graph.nodes if "sym_size" in str(n.target)]
        assert sizes and isinstance(sizes[0].meta["val"], torch.SymInt)
        key = DtypeChecks.key(ranged.graph_module)
        assert key is not None and "('SymInt', ('symbol', 's" in str(key)
        answered = checks.answered
        ranged._validate()
        assert checks.answered == answered + 1

        # A value of a kind the key does not spell (a size's unbacked symbol): always run.
        class Counted(torch.nn.Module):
            def forward(self, n: torch.Tensor) -> torch.Tensor:
                k = n.item()
                torch._check(k >= 0)
                torch._check(k <= 8)
                return torch.zeros(k) + 1.0

        counted = to_edge(torch.export.export(Counted(), (torch.tensor(3),))).exported_program()
        assert DtypeChecks.key(counted.graph_module) is None
        ran = checks.run
        counted._validate()
        assert checks.run == ran + 1
    assert verifier._check_tensor_args_matching_op_allowed_dtype is executorch_s


def test_legalize_s_namespace_is_the_one_torch_s_create_name_fills() -> None:
    """The namespace legalize_in_place gives the graph equals a new Graph's after registering
    the same names in the same order through torch's create_name (counts per base, used names,
    names per node), and a name create_name would change (a duplicate, a builtin, a keyword, a
    name outside its pattern) makes it hand the graph to torch."""
    from torch.fx.graph import _Namespace

    from lowerd.lowering.graph_legalize import _namespace_in

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

    def torch_s(names: list[Named]) -> _Namespace:
        namespace = _Namespace()
        for node in names:
            assert namespace.create_name(node.name, None) == node.name
            namespace.associate_name_with_obj(node.name, node)
        return namespace

    order = [Named(n) for n in ("x", "add_3", "add", "getitem_12", "getitem", "add_1", "_0x")]
    ours, theirs = _namespace_in(order), torch_s(order)
    assert list(ours._base_count.items()) == list(theirs._base_count.items())
    assert ours._used_names == theirs._used_names
    assert list(ours._obj_to_name.items()) == list(theirs._obj_to_name.items())
    for renamed in ("add_3", "input", "max", "lambda", "1st", "a-b"):
        assert _namespace_in([*order, Named(renamed)]) is None
