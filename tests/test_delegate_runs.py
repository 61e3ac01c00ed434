"""lowering/delegate_runs.py's conditions on real FakeTensors and a real ShapeEnv: what a run must
be for its outputs to serve a later call, and what counts as a change to the ShapeEnv.
tests/test_partition_speedups.py checks the bytes of a program emitted with it against stock's
and that it served calls."""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from lowerd.lowering.delegate_runs import _facts, _kept, _remade, _storage


def _dynamic(mode: FakeTensorMode, *sizes: int) -> Any:
    """A FakeTensor of `mode` whose first size is a backed symbol."""
    dims = [DimDynamic.DYNAMIC] + [DimDynamic.STATIC] * (len(sizes) - 1)
    context = StatelessSymbolicContext(dynamic_sizes=dims)
    return mode.from_tensor(
        torch.randn(*sizes), symbolic_context=context, source=ConstantSource("x")
    )


def test_fresh_outputs_are_kept_and_remade_with_their_metadata() -> None:
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = _dynamic(mode, 6, 4)
    with mode:
        out = (x.t() @ x).relu(), (x * 2).to(torch.float16)
    kept = _kept(out, (x,))
    assert kept is not None
    remade = _remade(kept)
    assert isinstance(remade, tuple) and len(remade) == 2
    for mine, theirs in zip(remade, out, strict=True):
        assert (mine.shape, mine.stride(), mine.dtype) == (
            theirs.shape,
            theirs.stride(),
            theirs.dtype,
        )
        assert (mine.requires_grad, mine.device, mine.layout) == (
            theirs.requires_grad,
            theirs.device,
            theirs.layout,
        )
        assert mine.fake_mode is mode and _storage(mine) != _storage(theirs)
    assert str(remade[1].shape[0]) == str(x.shape[0])  # the same symbol, not a new one


def test_views_inputs_and_shared_storage_are_not_kept() -> None:
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = _dynamic(mode, 6, 4)
    with mode:
        fresh = x + 1
        view = fresh.view(-1)
    assert _kept((x,), (x,)) is None  # the input itself
    assert _kept((fresh, view), (x,)) is None  # a view of another output
    assert _kept(view, (x,)) is None
    assert _kept((fresh, 3), (x,)) is None  # not a tensor
    assert _kept(fresh, (x,)) is not None


def test_a_run_that_adds_a_guard_changes_the_facts_one_that_asks_again_does_not() -> None:
    mode = FakeTensorMode(shape_env=ShapeEnv())
    x = _dynamic(mode, 6, 4)
    before = _facts((x,))
    assert bool(x.shape[0] > 2)  # a new guard on the symbol
    guarded = _facts((x,))
    assert guarded != before
    assert bool(x.shape[0] > 2)  # answered from the guard already there
    assert _facts((x,)) == guarded
    mode.shape_env.create_unbacked_symint()  # a new symbol
    assert _facts((x,)) != guarded
    assert _facts((3,)) is None  # no ShapeEnv: nothing a run could change


def test_programs_whose_outputs_may_depend_on_values_are_always_run() -> None:
    from executorch.exir.dialects._ops import ops as exir_ops

    from lowerd.lowering.delegate_runs import _reads_values

    edge, aten = exir_ops.edge.aten, torch.ops.aten
    assert _reads_values(edge.nonzero.default)  # its size is the count of non-zeros
    assert _reads_values(edge._local_scalar_dense.default)
    assert _reads_values(aten.lift_fresh_copy.default)  # kept as a constant by the fake mode
    assert not _reads_values(edge.linear.default)
    assert not _reads_values(edge.add.Tensor)


def test_a_fake_constant_is_not_read() -> None:
    """A FakeTensor whose constant is fake itself (a propagated constant of a lowered program):
    reading its values would make unbacked symbols; the key does not spell it, and the
    ShapeEnv is left as it was."""
    import pytest

    from lowerd.lowering.delegate_runs import _value_key
    from lowerd.lowering.run_keys import Unspelled

    mode = FakeTensorMode(shape_env=ShapeEnv())
    value = mode.from_tensor(torch.ones(1, 4))
    value.constant = mode.from_tensor(torch.ones(1, 4))
    before = _facts((value,))
    with pytest.raises(Unspelled):
        _value_key(value)
    assert _facts((value,)) == before
    value.constant = torch.ones(1, 4)  # a real constant is spelled by its bytes
    assert _value_key(value)[-1] == (
        torch.float32,
        (1, 4),
        tuple(torch.ones(4).view(torch.uint8).tolist()),
    )
