"""The wrapper lowerd hands ExecuTorch instead of a partitioner (lowering/observed_partitioner.py):
ExecuTorch lowers through it to the bytes it makes with the partitioner itself, and lowerd sees
each method's partitioning, inside its listening context, once per method."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.partitioner import Partitioner

from lowerd.lowering.observed_partitioner import observe


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + 1


def _programs() -> dict[str, Any]:
    torch.manual_seed(0)
    module = _Small().eval()
    return {
        "forward": torch.export.export(module, (torch.randn(2, 4),)),
        "other": torch.export.export(module, (torch.randn(5, 4),)),
    }


def _pte(partitioners: list[Any]) -> bytes:
    edge = to_edge_transform_and_lower(_programs(), partitioner=partitioners)
    return bytes(edge.to_executorch().buffer)


def test_lowering_through_the_wrapper_gives_stock_bytes_and_sees_each_method() -> None:
    listened: list[str] = []
    results: list[Any] = []

    @contextmanager
    def listening() -> Iterator[None]:
        listened.append("open")
        yield
        listened.append("closed")

    observed = observe(XnnpackPartitioner(), listening, results.append)

    assert _pte([observed]) == _pte([XnnpackPartitioner()])
    assert listened == ["open", "closed"] * 2  # one partition() per method, each listened to
    assert len(results) == 2
    assert all(r.tagged_exported_program is not None and r.partition_tags for r in results)


def test_the_wrapper_reads_as_the_partitioner_it_wraps() -> None:
    inner = XnnpackPartitioner()
    observed = observe(inner, _nothing)

    assert isinstance(observed, Partitioner)
    assert observed.inner is inner
    # ExecuTorch names a partitioner by its class in what it reports, and prints it.
    assert type(observed).__name__ == "XnnpackPartitioner"
    assert repr(observed) == repr(inner) == str(observed)
    assert observed.delegation_spec is inner.delegation_spec
    assert observed.spec is inner.spec
    program = _programs()["forward"]
    # The ops it keeps from decomposition (the filter is a closure made afresh by each call).
    assert observed.ops_to_not_decompose(program)[0] == inner.ops_to_not_decompose(program)[0]
    # One wrapper class per wrapped class.
    assert type(observe(XnnpackPartitioner(), _nothing)) is type(observed)


@contextmanager
def _nothing() -> Iterator[None]:
    yield
