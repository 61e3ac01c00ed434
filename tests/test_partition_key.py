"""The partition key covers what preprocess reads, and nothing that changes from run to run."""

from __future__ import annotations

import pytest
import torch
from executorch.exir import to_edge
from executorch.exir._serialize._named_data_store import NamedDataStoreOutput
from executorch.exir._serialize.data_serializer import DataEntry
from executorch.exir.backend.backend_details import PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.scalar_type import ScalarType
from executorch.exir.tensor_layout import TensorLayout

from lowerd.lowering.partition_key import Unkeyable, key_details
from lowerd.lowering.preprocess_codec import NotPlainData, decode_results, encode_results


class Scaled(torch.nn.Module):
    def __init__(self, scale: float = 0.1):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # leaky_relu keeps its slope a Python float in the graph (a product would lift it into
        # a float32 constant tensor).
        return torch.nn.functional.leaky_relu(self.fc(x), self.scale)


def edge_program(scale: float = 0.1, seed: int = 0) -> torch.export.ExportedProgram:
    torch.manual_seed(seed)
    exported = torch.export.export(Scaled(scale).eval(), (torch.randn(2, 4),))
    return to_edge(exported).exported_program()


def details(program: torch.export.ExportedProgram, specs: list | None = None):
    return key_details("XnnpackBackend", [program], [specs or []]).details


def first_op(program: torch.export.ExportedProgram) -> torch.fx.Node:
    return next(n for n in program.graph.nodes if n.op == "call_function")


def test_the_same_model_exported_twice_has_one_key() -> None:
    # from_node holds id(graph) and differs between the two exports; the key must not see it.
    assert details(edge_program()).digest() == details(edge_program()).digest()


def test_provenance_metadata_is_not_keyed() -> None:
    program = edge_program()
    before = details(program)
    node = first_op(program)
    node.meta["stack_trace"] = 'File "/elsewhere.py", line 99, in forward'
    node.meta["nn_module_stack"] = {"renamed": ("renamed", "Other")}
    node.meta["seq_nr"] = 12345
    assert details(program) == before


def test_debug_handles_are_keyed() -> None:
    program = edge_program()
    before = details(program)
    first_op(program).meta["debug_handle"] = 999
    assert before.diff(details(program)) == ["graph"]


def test_floats_are_keyed_exactly() -> None:
    near = details(edge_program(scale=0.1 + 1e-12))
    assert details(edge_program(scale=0.1)).diff(near) == ["graph"]


def test_weights_are_keyed_by_content() -> None:
    assert details(edge_program(seed=0)).diff(details(edge_program(seed=1))) == ["tensors"]


def test_compile_specs_are_keyed() -> None:
    program = edge_program()
    plain = details(program, [CompileSpec("mode", b"fast")])
    other = details(program, [CompileSpec("mode", b"small")])
    assert plain.diff(other) == ["compile_specs"]


def test_a_value_that_prints_its_address_is_not_keyed() -> None:
    program = edge_program()
    first_op(program).meta["custom"] = object()
    with pytest.raises(Unkeyable):
        details(program)


def _users_function() -> None:
    pass


def test_a_torch_function_is_keyed_by_name_and_a_users_function_is_not() -> None:
    from torch._functorch.predispatch import lazy_load_decompositions

    program = edge_program()
    first_op(program).meta["custom"] = lazy_load_decompositions
    assert details(program) == details(program)  # a Llama's export holds such targets
    first_op(program).meta["custom"] = _users_function  # may change under the same name
    with pytest.raises(Unkeyable):
        details(program)


def test_a_function_flat_apply_reads_through_get_attr_is_keyed_like_one_in_the_graph() -> None:
    from torch._functorch.predispatch import lazy_load_decompositions
    from torch._higher_order_ops.flat_apply import _ConstantFunction
    from torch.utils._pytree import tree_flatten

    def with_spec(function: object) -> torch.export.ExportedProgram:
        program = edge_program()
        _, spec = tree_flatten(_ConstantFunction(function))  # as export stores flat_apply's
        program.graph_module.function_spec = spec
        with program.graph.inserting_before(first_op(program)):
            program.graph.get_attr("function_spec")
        return program

    torch_spec = details(with_spec(lazy_load_decompositions))
    assert torch_spec == details(with_spec(lazy_load_decompositions))
    assert torch_spec.submodules != details(with_spec(torch.relu)).submodules
    with pytest.raises(Unkeyable):
        details(with_spec(_users_function))


def test_preprocess_results_survive_msgpack_exactly() -> None:
    layout = TensorLayout(scalar_type=ScalarType.FLOAT, sizes=[2, 3], dim_order=[0, 1])
    result = PreprocessResult(
        processed_bytes=b"XH00\x00\x01blob",
        debug_handle_map={0: (1, 2), 3: (4,)},
        data_store_output=NamedDataStoreOutput(
            buffers=[b"\x00" * 24, b"weights"],
            pte_data={"w": DataEntry(buffer_index=1, alignment=16, tensor_layout=None)},
            external_data={"x.ptd": {"t": DataEntry(0, 64, layout)}},
        ),
    )
    named = PreprocessResult(processed_bytes=b"", debug_handle_map={"node": [7]})

    decoded = decode_results(encode_results([result, named], (1, 2, 4)))
    assert decoded == ([result, named], (1, 2, 4))


def test_results_that_are_not_plain_data_are_refused() -> None:
    with pytest.raises(NotPlainData):
        encode_results([PreprocessResult(processed_bytes=b"x", _delegate_info_meta=object())], ())
    with pytest.raises(NotPlainData):
        encode_results([PreprocessResult(processed_bytes=b"x", debug_handle_map={0: "1"})], ())


def stable(program: torch.export.ExportedProgram):
    return key_details("XnnpackBackend", [program], [[]], stable_naming=True)


def test_stable_naming_keys_names_and_handles_by_position() -> None:
    program = edge_program()
    before = stable(program)
    for node in program.graph.nodes:
        if "debug_handle" in node.meta:
            node.meta["debug_handle"] += 100  # an op inserted earlier shifts every handle
    after = stable(program)
    assert after.digest() == before.digest()
    assert after.handles == tuple(h + 100 for h in before.handles)
    assert details(program).diff(key_details("XnnpackBackend", [edge_program()], [[]]).details)


class Renamed(Scaled):
    """The same model, its input named otherwise: as a partition's input is named after the op
    that made it upstream (`aten_mul_tensor_13`), which an op added earlier renames."""

    def forward(self, renamed: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(renamed)


def test_stable_naming_keys_an_inputs_name_by_position() -> None:
    torch.manual_seed(0)
    exported = torch.export.export(Renamed().eval(), (torch.randn(2, 4),))
    renamed = to_edge(exported).exported_program()
    assert "renamed" in [n.target for n in renamed.graph.nodes if n.op == "placeholder"]
    assert stable(renamed).digest() == stable(edge_program()).digest()
    assert details(renamed).diff(details(edge_program())) == ["graph", "signature"]


def dynamic_program(high: int = 8) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    rows = torch.export.Dim("rows", min=1, max=high)
    exported = torch.export.export(
        Scaled().eval(), (torch.randn(2, 4),), dynamic_shapes=({0: rows},)
    )
    return to_edge(exported).exported_program()


def test_the_ranges_of_the_graphs_symbols_are_keyed() -> None:
    assert details(dynamic_program(8)).diff(details(dynamic_program(9))) == ["range_constraints"]


def test_a_range_of_a_symbol_not_in_the_graph_is_not_keyed() -> None:
    """A partition's program carries its whole program's range constraints, whose fresh
    unbacked symbols an edit elsewhere (or regional edge generation) numbers otherwise."""
    import sympy
    from torch.utils._sympy.value_ranges import ValueRanges

    program = dynamic_program()
    before = details(program)
    program.range_constraints[sympy.Symbol("u41", integer=True)] = ValueRanges(0, 6)
    assert details(program) == before
    # ... but the whole dict is, where a program fingerprint asks for it.
    whole = key_details("XnnpackBackend", [program], [[]], whole_ranges=True).details
    assert whole.range_constraints != before.range_constraints


def test_a_bool_range_of_another_symbol_is_keyed() -> None:
    """coremltools maps every entry of range_constraints and raises on a bool range."""
    import sympy
    from torch.utils._sympy.value_ranges import ValueRanges

    program = dynamic_program()
    before = details(program)
    program.range_constraints[sympy.Symbol("u41", integer=True)] = ValueRanges(
        sympy.false, sympy.true
    )
    assert details(program).diff(before) == ["range_constraints"]


def _unbacked(count: int) -> list[torch.SymInt]:
    """Unbacked sizes as export's ShapeEnv makes them (u0, u1, ... by its counter), in [0, 8]."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    made = [env.create_unbacked_symint() for _ in range(count)]
    for size in made:
        torch._check(size >= 0)
        torch._check(size <= 8)
    return made


def _keyed(stable_naming: bool, *values: object) -> list[object]:
    """The values as one partition's encoder keys them, in order."""
    from lowerd.lowering.partition_key import _encode_value, _Encoder

    encoder = _Encoder(torch.fx.Graph(), stable_naming)
    return [_encode_value(value, encoder) for value in values]


def test_stable_naming_keys_unbacked_symbols_by_first_appearance() -> None:
    """Stock's edge replays number a partition's unbacked symbols by everything its ShapeEnv
    made before (u3 in stock's program, u1 in a regional one): the same partition either way."""
    u0, u1, u2 = _unbacked(3)
    assert _keyed(True, u2 + 1, u1 * 2) == _keyed(True, u0 + 1, u2 * 2)
    assert _keyed(True, u2 + 1, u2 * 2) != _keyed(True, u0 + 1, u2 * 2)  # one symbol or two
    assert _keyed(False, u2 + 1) != _keyed(False, u0 + 1)  # exact naming keeps the names


def test_two_unbacked_symbols_first_met_together_are_not_keyed() -> None:
    """Their order of appearance is undefined: no name for either would be exact."""
    u0, u1 = _unbacked(2)
    with pytest.raises(Unkeyable):
        _keyed(True, u0 + u1)
    assert _keyed(True, u1, u0 + u1) == _keyed(True, u0, u1 + u0)


def test_the_ranges_of_renamed_unbacked_symbols_are_keyed() -> None:
    """XNNPACK sizes a dynamic tensor by the upper bound of its symbols' ranges."""

    class Sliced(torch.nn.Module):
        def __init__(self, high: int):
            super().__init__()
            self.high = high

        def forward(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
            n = rows[0].item()
            torch._check(n >= 1)
            torch._check(n <= self.high)
            return torch.relu(x[:n])

    def program(high: int) -> torch.export.ExportedProgram:
        return torch.export.export(Sliced(high), (torch.randn(8, 4), torch.tensor([3])))

    assert stable(program(8)).digest() == stable(program(8)).digest()
    assert "range_constraints" in stable(program(8)).details.diff(stable(program(7)).details)
