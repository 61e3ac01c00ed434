"""lowering/size_expressions.py on a real ShapeEnv: a symbolic size written as plain data reads
back as the same expression with the same hint; what it cannot hold exactly is not written, and
what does not rebuild as written is not read."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv, StatelessSymbolicContext

from lowerd.lowering.size_expressions import NotReadable, NotWritable, read, symbol_facts, written


def _sequence(shape_env: ShapeEnv, hint: int = 12, name: str = "seq") -> torch.SymInt:
    symbol = shape_env.create_symbol(hint, ConstantSource(name))
    size = shape_env.create_symintnode(symbol, hint=hint, source=ConstantSource(name))
    assert isinstance(size, torch.SymInt)
    return size


def _through_msgpack(plain: Any) -> Any:
    """As the template store holds it."""
    return msgpack.unpackb(msgpack.packb(plain, use_bin_type=True), raw=False)


@pytest.mark.parametrize(
    "make",
    [
        lambda s: s,
        lambda s: s * 64,
        lambda s: s * 64 + 3,
        lambda s: s // 4,
        lambda s: s % 5,
        lambda s: (s + 1) * (s - 1),
    ],
)
def test_a_backed_size_reads_back_as_the_same_expression_and_hint(make: Any) -> None:
    shape_env = ShapeEnv()
    size = make(_sequence(shape_env))
    back = read(_through_msgpack(written(size)), shape_env)
    assert back.node.expr == size.node.expr
    assert back.node.hint == size.node.hint
    assert back.node.shape_env is shape_env


def test_the_symbols_read_back_are_the_shape_env_s_own() -> None:
    """sympy compares symbols by name and assumptions: the ShapeEnv's object, never a new one."""
    shape_env = ShapeEnv()
    size = _sequence(shape_env)
    [symbol] = read(written(size), shape_env).node.expr.free_symbols
    assert symbol is size.node.expr


def test_an_unbacked_size_is_not_written() -> None:
    shape_env = ShapeEnv()
    with pytest.raises(NotWritable, match="not backed"):
        written(shape_env.create_unbacked_symint() * 2)


@pytest.mark.parametrize(
    "plain, why",
    [
        (["add", [["int", 0], ["symbol", "SEQ"]]], "does not rebuild as written"),
        (["symbol", "s999999"], "no backed symbol"),
        (["int", 4], "does not rebuild as written"),
        (["exp", [["symbol", "SEQ"]]], "operation"),
        (["symbol"], "a size"),
        ("SEQ", "a size"),
        (["mul", "SEQ"], "operation"),
    ],
)
def test_a_plain_form_that_does_not_rebuild_as_written_is_not_read(plain: Any, why: str) -> None:
    """SEQ stands for the sequence symbol's name (ShapeEnvs number symbols per process)."""
    shape_env = ShapeEnv()
    name = str(_sequence(shape_env).node.expr)
    named = msgpack.unpackb(msgpack.packb(plain).replace(b"SEQ", name.encode()), raw=False)
    with pytest.raises(NotReadable, match=why):
        read(named, shape_env)


def test_a_size_in_a_program_without_symbols_is_not_read() -> None:
    with pytest.raises(NotReadable, match="without symbols"):
        read(["symbol", "s0"], None)


def test_symbol_facts_hold_what_a_name_means() -> None:
    """A template's key holds them: another range, source or hint under the same name differs."""
    facts = [symbol_facts(_env(hint, name)) for hint, name in ((12, "seq"), (12, "seq"))]
    assert len(facts[0]) == 1 and facts[0][0][1:] == facts[1][0][1:]
    assert symbol_facts(_env(13, "seq"))[0][1:] != facts[0][0][1:]
    assert symbol_facts(_env(12, "other"))[0][1:] != facts[0][0][1:]
    assert symbol_facts(None) == []


def _env(hint: int, name: str) -> ShapeEnv:
    shape_env = ShapeEnv()
    _sequence(shape_env, hint, name)
    return shape_env


def test_a_fake_tensor_s_symbolic_sizes_round_trip_in_its_mode() -> None:
    """As template_store reads a template's value: the sizes and strides of a fake tensor."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic

    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env)
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.STATIC, DimDynamic.DYNAMIC])
    value = mode.from_tensor(torch.empty(1, 12, 64)[..., 0], symbolic_context=context)
    shape = [read(written(d), shape_env) if isinstance(d, torch.SymInt) else d for d in value.shape]
    assert [str(d) for d in shape] == [str(d) for d in value.shape]
    assert isinstance(shape[1], torch.SymInt) and shape[1].node.expr is value.shape[1].node.expr
    strides = value.stride()
    stride = [read(written(d), shape_env) if isinstance(d, torch.SymInt) else d for d in strides]
    assert [str(d) for d in stride] == [str(d) for d in strides]
