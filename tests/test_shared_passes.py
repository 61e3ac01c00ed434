"""Repeated layers preprocessed once (lowering/shared_passes.py): partitions that differ only in
their weights share one run of XNNPACK's passes, and every blob, its named data and the .pte
equal stock's."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn

from lowerd.cache.store import BlobStore
from lowerd.lowering.partition_key import key_details
from lowerd.lowering.preprocess_cache import PreprocessCache
from lowerd.lowering.shared_passes import structure_digest
from lowerd.lowering.xnnpack_passes import XnnpackPassSkips


class _Mlp(nn.Module):
    """An MLP with a residual and a scale: linear, sigmoid, mul, add."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, width, bias=False)
        self.down = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.sigmoid(self.up(x))) * self.scale


class _ConvNorm(nn.Module):
    """Convolution and batch norm: XNNPACK's passes fold the norm into the kernel, a
    weight-dependent transform, so these partitions never share."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.conv(x)))


class _Stack(nn.Module):
    """Three conv blocks, then three MLP layers; a cumsum (not XNNPACK's) before each block makes
    it a partition of its own, so the blocks of a kind differ only in their weights (but the
    first conv block, which reads the model's input)."""

    def __init__(self, channels: int = 4, side: int = 4) -> None:
        super().__init__()
        self.convs = nn.ModuleList(_ConvNorm(channels) for _ in range(3))
        self.layers = nn.ModuleList(_Mlp(channels * side * side) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = conv(torch.cumsum(x, dim=-1))
        x = torch.flatten(torch.cumsum(x, dim=-1), 1)
        for layer in self.layers:
            x = layer(torch.cumsum(x, dim=-1))
        return x


def _model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = _Stack().eval()
    with torch.no_grad():
        for conv in model.convs:  # statistics of their own, so each folded kernel differs
            conv.norm.running_mean.uniform_(-0.5, 0.5)
            conv.norm.running_var.uniform_(0.5, 2.0)
        # The last layer's two projections hold the same weights: XNNPACK stores them once
        # (its named data is keyed by digest), where the layers before stored two.
        last = model.layers[2]
        last.down.weight.copy_(last.up.weight)
    return model, (torch.randn(1, 4, 4, 4),)


@dataclass(frozen=True)
class _Lowered:
    pte: bytes
    # Per delegate, in graph order: the blob, then its named data (key -> buffer bytes digest).
    blobs: list[tuple[str, tuple[tuple[str, str], ...]]]


def _lower() -> _Lowered:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    model, args = _model()
    edge = to_edge_transform_and_lower(
        torch.export.export(model, args), partitioner=[XnnpackPartitioner()]
    )
    blobs = []
    for _, module in edge.exported_program().graph_module.named_children():
        if isinstance(module, LoweredBackendModule):
            data = module.named_data_store_output
            named = tuple(
                (key, _digest(data.buffers[entry.buffer_index]))
                for key, entry in sorted(data.pte_data.items())
            )
            blobs.append((_digest(module.processed_bytes), named))
    return _Lowered(bytes(edge.to_executorch().buffer), blobs)


def _digest(data: Any) -> str:
    return hashlib.sha256(bytes(data)).hexdigest()


@dataclass(frozen=True)
class _Shared:
    lowered: _Lowered
    cache: PreprocessCache
    structures: list[str]  # each preprocess call's structure digest, in order


def _observed_structures(structures: list[str]) -> Any:
    """XNNPACK's preprocess, noting each partition's structure digest before it runs (the blob
    cache, installed after, wraps this)."""
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

    raw = XnnpackBackend.__dict__["preprocess"].__func__

    def preprocess(program: Any, specs: list[Any]) -> Any:
        key = key_details("XnnpackBackend", [program], [specs], stable_naming=True)
        structures.append(structure_digest(key, program))
        return raw(program, specs)

    return staticmethod(preprocess)


@pytest.fixture(scope="module")
def stock() -> _Lowered:
    return _lower()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Shared]:
    """The same lowering inside lowerd's blob cache (an empty one) and pass skipping."""
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend

    store = BlobStore(tmp_path_factory.mktemp("shared") / "cache", max_bytes=None)
    cache = PreprocessCache(store)
    structures: list[str] = []
    raw = XnnpackBackend.__dict__["preprocess"]
    XnnpackBackend.preprocess = _observed_structures(structures)
    try:
        with cache.installed(), XnnpackPassSkips(store).installed():
            lowered = _lower()
    finally:
        XnnpackBackend.preprocess = raw
    yield _Shared(lowered, cache, structures)


def test_every_blob_and_the_pte_equal_stock(stock: _Lowered, shared: _Shared) -> None:
    assert len(stock.blobs) == 7  # three conv blocks, the flatten, three MLP layers
    assert shared.lowered.blobs == stock.blobs
    assert _digest(shared.lowered.pte) == _digest(stock.pte)


def test_the_later_layers_share_the_first_ones_passes(shared: _Shared) -> None:
    records = shared.cache.records
    assert [r.outcome for r in records] == ["miss"] * 7
    assert [r.shared for r in records] == [False] * 5 + [True, True]
    assert (shared.cache.sharing.full, shared.cache.sharing.shared) == (5, 2)
    # The last layer's two projections are one named entry where the first layer's are two.
    assert len(shared.lowered.blobs[6][1]) == len(shared.lowered.blobs[4][1]) - 1


def test_conv_blocks_of_one_structure_are_preprocessed_in_full(shared: _Shared) -> None:
    """The second and third conv blocks differ only in their weights too, but their batch norm
    is folded into the kernel by a pass that reads the values: they do not share."""
    _, conv_second, conv_third, _, *layers = shared.structures
    assert conv_second == conv_third
    assert layers[0] == layers[1] == layers[2] != conv_second
    assert not any(r.shared for r in shared.cache.records[:3])


def test_a_preprocess_is_given_a_copy_and_a_hit_copies_nothing(
    stock: _Lowered, shared: _Shared
) -> None:
    """ExecuTorch deep-copies every partition's program before preprocess; lowerd copies only
    a program preprocess runs on (preprocess_cache.py): the seven misses above copied seven, a
    lowering served whole by the cache copies none, and what preprocess runs on is never the
    partition's own program (the lowered module's)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    assert shared.cache.copies == 7
    store = shared.cache.store
    assert store is not None
    again = PreprocessCache(store)
    with again.installed():
        lowered = _lower()
    assert [r.outcome for r in again.records] == ["hit"] * 7
    assert again.copies == 0
    assert _digest(lowered.pte) == _digest(stock.pte)

    given: list[Any] = []
    raw = XnnpackBackend.__dict__["preprocess"]

    def preprocess(program: Any, specs: list[Any]) -> Any:
        given.append(program)
        return raw.__func__(program, specs)

    XnnpackBackend.preprocess = staticmethod(preprocess)
    cold = PreprocessCache(None)  # the cache off: every partition preprocessed
    try:
        with cold.installed():
            model, args = _model()
            edge = to_edge_transform_and_lower(
                torch.export.export(model, args), partitioner=[XnnpackPartitioner()]
            )
    finally:
        XnnpackBackend.preprocess = raw
    modules = [
        m
        for _, m in edge.exported_program().graph_module.named_children()
        if isinstance(m, LoweredBackendModule)
    ]
    assert len(given) == len(modules) == cold.copies == 7
    owned = {id(m.original_module) for m in modules}
    assert not owned & {id(program) for program in given}
    assert _digest(bytes(edge.to_executorch().buffer)) == _digest(stock.pte)
