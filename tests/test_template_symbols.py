"""lowering/template_symbols.py and the names template_store.py writes for what optimum's
recipe puts in a template, on real ShapeEnvs and torch's own ops: a template's unbacked symbols
read back in another ShapeEnv as the reading region's and as fresh ones with their ranges; what
does not fit is not written or not read. (tests/test_region_llm.py lowers a whole program
through the store.)"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from lowerd.lowering import template_store
from lowerd.lowering.region_cut import Region
from lowerd.lowering.size_expressions import NotReadable, NotWritable, read, written
from lowerd.lowering.template_symbols import Reading, Written


def _sequence(shape_env: ShapeEnv) -> torch.SymInt:
    symbol = shape_env.create_symbol(12, ConstantSource("seq"))
    size = shape_env.create_symintnode(symbol, hint=12, source=ConstantSource("seq"))
    assert isinstance(size, torch.SymInt)
    return size


def _item(shape_env: ShapeEnv, upper: int | None = None) -> torch.SymInt:
    """An `.item()`'s unbacked SymInt, bounded as update_cache's checks bound start_pos."""
    value = shape_env.create_unbacked_symint()
    torch._check(value >= 0)
    if upper is not None:
        torch._check(value < upper)
    return value


def _binding(value: torch.SymInt) -> Region:
    """A region whose one node binds the symbol, as an `.item()` of export's does."""
    graph = torch.fx.Graph()
    node = graph.placeholder("item")
    node.meta["unbacked_bindings"] = {value.node.expr: ()}
    return Region("layers.0", [node])


def _written(shape_env: ShapeEnv, bound: torch.SymInt) -> Written:
    return Written([bound.node.expr], set(), shape_env.var_to_range, set(shape_env.size_like))


def test_an_assertion_of_a_length_and_a_replay_s_symbol_reads_back_in_another_shape_env() -> None:
    theirs = ShapeEnv()
    length, bound, fresh = _sequence(theirs), _item(theirs), _item(theirs, upper=8)
    symbols = _written(theirs, bound)
    checked = written(length + fresh <= 8, symbols.unbacked)
    at = written(bound, symbols.unbacked)
    facts = symbols.facts()
    assert at == ["unbacked", ["bound", 0]] and facts == [[0, 7, False]]

    mine = ShapeEnv()
    _item(mine)  # another symbol first: the names differ between the ShapeEnvs
    my_length, my_bound = _sequence(mine), _item(mine)
    reading = Reading.of(mine, _binding(my_bound), symbols.names(), facts)
    back = read(checked, mine, reading.unbacked)
    [made] = reading.fresh
    assert isinstance(back, torch.SymBool) and back.node.hint is None
    assert back.node.expr == (my_length.node.expr + made <= 8) and str(made) != str(fresh)
    assert str(mine.var_to_range[made]) == str(theirs.var_to_range[fresh.node.expr])
    assert made not in mine.pending_fresh_unbacked_symbols  # bound by the node holding it
    assert read(at, mine, reading.unbacked).node.expr == my_bound.node.expr
    message = f"Runtime assertion failed for expression {bound} >= 0 on node 'ge_1'"
    assert symbols.message(message) == message
    assert reading.message(message) == message.replace(str(bound), str(my_bound))


def test_an_unbounded_symbol_s_range_reads_back() -> None:
    theirs = ShapeEnv()
    bound, fresh = _item(theirs), _item(theirs)
    symbols = _written(theirs, bound)
    written(fresh, symbols.unbacked)
    assert symbols.facts() == [[0, "int_oo", False]]
    mine = ShapeEnv()
    [made] = Reading.of(mine, _binding(_item(mine)), symbols.names(), symbols.facts()).fresh
    assert str(mine.var_to_range[made]) == str(theirs.var_to_range[fresh.node.expr])


def test_what_is_not_the_region_s_own_is_not_written() -> None:
    theirs = ShapeEnv()
    bound, other = _item(theirs), _item(theirs)
    symbols = Written([bound.node.expr], {other.node.expr}, theirs.var_to_range, set())
    with pytest.raises(NotWritable, match="not its region's"):
        written(other + 1, symbols.unbacked)
    named = f"Runtime assertion failed for expression {other} >= 0 on node 'ge'"
    with pytest.raises(NotWritable, match="an assertion naming"):
        symbols.message(named)
    with pytest.raises(NotWritable, match="unbacked_bindings"):
        symbols.bindings({bound.node.expr: ("size", 0)})


@pytest.mark.parametrize(
    "names, facts, why",
    [
        (["u0", "u1"], [], "symbols layers.0 binds"),
        (["u0"], [[0, "oo?", False]], "a range"),
        (["u0"], [[5, 2, False]], "a range"),
        (["u0"], [[0, 3]], "a fresh symbol"),
        (["u0"], "fresh", "fresh symbols"),
    ],
)
def test_an_entry_s_symbols_that_do_not_fit_are_not_read(names: Any, facts: Any, why: str) -> None:
    mine = ShapeEnv()
    with pytest.raises(NotReadable, match=why):
        Reading.of(mine, _binding(_item(mine)), names, facts)


def test_a_payload_or_message_naming_no_symbol_of_the_region_is_not_read() -> None:
    mine = ShapeEnv()
    reading = Reading.of(mine, _binding(_item(mine)), ["u7"], [[0, 7, True]])
    for payload in (["fresh", 1], ["bound", -1], ["other", 0], "u7"):
        with pytest.raises(NotReadable, match="an unbacked symbol"):
            reading.symbol(payload)
    with pytest.raises(NotReadable, match="does not bind"):
        reading.message("Runtime assertion failed for expression u8 >= 0 on node 'ge'")
    assert reading.fresh[0] in mine.size_like


def test_an_op_kept_from_decomposition_is_defined_where_it_is_read() -> None:
    """ExecuTorch defines EDGE_DO_NOT_DECOMP's ops in the lowering that keeps them: an entry
    read first in a process defines its op as that lowering would (hardtanh: one no lowering
    here keeps)."""
    plain = ["no_decomp", ["op", "aten", "hardtanh", "default"]]
    kept = template_store._read_original_aten(plain)
    assert str(kept) == "EDGE_DO_NOT_DECOMP.hardtanh.default"
    assert template_store._original_aten(kept) == plain


@pytest.mark.parametrize(
    "caller",
    [
        torch.ops.aten._assert_tensor_metadata.default,  # strict export's dtype checks
        torch.ops.aten.add,  # an op packet: torch.ops.llama.update_cache(...)
        torch.ops.higher_order.wrap_with_autocast,  # transformers' rotary embedding
        "view",
        torch.nn.Linear,
    ],
)
def test_a_source_fn_stack_callable_is_found_again_by_its_name(caller: Any) -> None:
    assert template_store._found_caller(template_store._caller(caller)) is caller


def test_the_rest_s_module_keys_are_the_reading_program_s() -> None:
    """Strict export keys a module reached through an attribute by its id(): read back, the
    rest's stacks take the keys the program's own nodes give the same modules."""
    stack = {"L__self__": ("", "Wrapper"), "140646": ("model", "Llama")}
    now = {"L__self__": ("", "Wrapper"), "139887": ("model", "Llama")}
    graph, stand_in, program = torch.fx.Graph(), torch.fx.Graph(), torch.fx.Graph()
    stored, edge, own = stand_in.placeholder("s"), graph.placeholder("e"), program.placeholder("o")
    stored.meta["nn_module_stack"], edge.meta["nn_module_stack"] = dict(stack), dict(stack)
    own.meta["nn_module_stack"] = now
    template_store._rekey_modules(Region(None, [stored]), Region(None, [own]), graph)
    assert stored.meta["nn_module_stack"] == edge.meta["nn_module_stack"] == now
    edge.meta["nn_module_stack"] = {"555": ("model.norm", "Norm")}
    with pytest.raises(template_store.Outdated, match="no node has now"):
        template_store._rekey_modules(Region(None, [stored]), Region(None, [own]), graph)
