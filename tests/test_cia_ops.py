"""torch's CompositeImplicitAutograd op collection populated once per collection
(lowering/cia_ops.py) finds what torch's own finds, an op a new library registers included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch._export import utils
from torch.export import exported_program

from lowerd.lowering.cia_ops import cia_ops_materialized_once
from lowerd.lowering.edge_speedups import validated_versions


@pytest.fixture
def new_library() -> Iterator[Any]:
    """A namespace torch.ops has not seen, with a functional op whose only kernel is a
    CompositeImplicitAutograd one registered with the C++ dispatcher: only a collection that
    populates torch.ops finds it."""
    library = torch.library.Library("lowerd_cia_ops_test", "DEF")
    library.define("twice(Tensor x) -> Tensor")
    library.impl("twice", lambda x: x + x, "CompositeImplicitAutograd")
    yield library
    library._destroy()


def test_the_collection_finds_torch_s_ops_populating_once(new_library: Any) -> None:
    populated = []
    real, stock = utils._materialize_cpp_cia_ops, utils._collect_all_valid_cia_ops

    def counted() -> None:
        populated.append(1)
        real()

    utils._materialize_cpp_cia_ops = counted  # the function the speedup calls through to
    try:
        with cia_ops_materialized_once():
            collected = exported_program._collect_all_valid_cia_ops()
            assert exported_program._collect_all_valid_cia_ops is not stock  # the speedup's
    finally:
        utils._materialize_cpp_cia_ops = real
    names = {op.name() for op in collected}
    assert "lowerd_cia_ops_test::twice" in names  # populated before its namespace was visited
    assert collected == stock()  # torch's own, after
    if validated_versions():
        assert len(populated) == 1
    # Put back on exit.
    assert exported_program._collect_all_valid_cia_ops is stock
    assert utils._collect_all_valid_cia_ops is stock
    assert utils._materialize_cpp_cia_ops is real
