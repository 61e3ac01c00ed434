"""Regional edge generation for ExecuTorch's LLM ops (optimum-executorch's recipe, issue 31):
each byte test checks the regional path ran and the .pte is stock's; each fallback test a case
the argument does not cover."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lowerd.cache.store import BlobStore
from lowerd.lowering.region_edge import RegionalRun, program_regions
from lowerd.lowering.template_store import TemplateStore

from regional import (
    Stack,
    lowered,
    lowered_through,
    partition_keys,
    regional_against_stock,
    regional_and_stock,
)
from stock import sha256


class Caching(nn.Module):
    """Attention by custom_sdpa over the layer's own KV caches, written by llama.update_cache
    (ExecuTorch's KV cache's write) at a constant start_pos."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.out = nn.Linear(32, 32)
        self.register_buffer("k_cache", torch.zeros(1, 8, 2, 16))
        self.register_buffer("v_cache", torch.zeros(1, 8, 2, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x, lambda: 0)

    def attend(self, x: torch.Tensor, start_pos: Callable[[], Any]) -> torch.Tensor:
        """The caches written at `start_pos()`, read by custom_sdpa at `start_pos()` again."""
        q, k, v = (linear(x).view(1, 4, 2, 16) for linear in self.qkv)
        at = start_pos()
        torch.ops.llama.update_cache(k, self.k_cache, at)
        torch.ops.llama.update_cache(v, self.v_cache, at)
        y = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start_pos(), None, 0.0, True)
        return x + self.out(y.reshape(1, 4, 32))


def _cached_program(stack: nn.Module, *inputs: torch.Tensor) -> torch.export.ExportedProgram:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 (registers llama's ops)

    torch.manual_seed(0)
    with torch.no_grad():  # as ExecuTorch's exports: a cache written from grad is refused
        return torch.export.export(stack.eval(), (torch.randn(1, 4, 32), *inputs))


def test_layers_updating_their_own_caches_are_generated_by_region() -> None:
    torch.manual_seed(0)  # the same weights in each run: stock's digest in the table
    program = _cached_program(Stack(Caching))
    targets = {str(node.target) for node in program.graph.nodes}
    assert "llama.update_cache.default" in targets
    stock, mine, runs = regional_against_stock("own-caches-updated", program)
    assert mine == stock
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]


class SharedCache(nn.Module):
    """Layers updating one cache the model owns: each write is read by the next layer."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.register_buffer("cache", torch.zeros(1, 8, 2, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
            torch.ops.llama.update_cache(x.view(1, 4, 2, 16), self.cache, 0)
            x = x + self.cache[:, :4].reshape(1, 4, 32)
        return x


def test_a_cache_updated_by_every_layer_runs_stock() -> None:
    why = "update_cache writes b_cache outside a layer (llama.update_cache.default)"
    assert program_regions(_cached_program(SharedCache())) == (None, why)


class Positioned(Caching):
    """Caching at the position an input_pos tensor holds, read with `.item()` by the cache's
    write and again by the attention, as ExecuTorch's KVCache.update and SDPACustom do
    (optimum's recipe): each layer's `.item()`s make unbacked symbols, the cache's with the
    runtime assertions update_cache's checks leave (`_assert_scalar` of u0 >= 0, ...)."""

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.attend(x, lambda: input_pos[0].item())


class PositionedStack(nn.Module):
    def __init__(self, layer: type[nn.Module] = Positioned) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layer() for _ in range(3))

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, input_pos)
        return x


def _positioned_program() -> torch.export.ExportedProgram:
    torch.manual_seed(0)  # the same weights in each
    return _cached_program(PositionedStack(), torch.tensor([0]))


@pytest.fixture(scope="module")
def positioned() -> tuple[list[str], bytes, bytes, list[RegionalRun], list[Any]]:
    """The positioned stack's export's targets, then its stock and regional lowerings (each of
    its own export) and their managers: the two tests below read the one pair of builds."""
    made = _positioned_program()
    targets = [str(node.target) for node in made.graph.nodes]
    edges: list[Any] = []
    stock, mine, runs = regional_and_stock(made, edges=edges, again=_positioned_program)
    return targets, stock, mine, runs, edges


def test_layers_reading_start_pos_with_item_are_generated_by_region(positioned: Any) -> None:
    """Each layer's unbacked symbols made afresh for its copy, its runtime assertions placed
    in stock's order (their debug handles shift every later node's, which XNNPACK writes into
    the blobs): by region, stock's bytes. Stock's run leaves symbols pending in its program's
    ShapeEnv (a second lowering of it raises), so each lowering gets its own export."""
    targets, stock, mine, runs, _ = positioned
    assert targets.count("aten.item.default") == 6 and "aten._assert_scalar.default" in targets
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]


def test_partition_keys_of_layers_reading_start_pos_with_item_are_stock_s(
    positioned: Any,
) -> None:
    """The replays' fresh symbols, in both programs' range constraints, are in no partition's
    key: a regional cold build and the stock build of its edit share blobs."""
    edges = positioned[4]
    stock_keys, mine_keys = (partition_keys(e.exported_program()) for e in edges)
    assert len(mine_keys) > 1 and mine_keys == stock_keys


class At(Caching):
    """Caching at a start_pos it is given."""

    def forward(self, x: torch.Tensor, start_pos: int) -> torch.Tensor:  # type: ignore[override]
        return self.attend(x, lambda: start_pos)


class SharedPosition(nn.Module):
    """start_pos read once, before the layers, and given to each."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(At() for _ in range(3))

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        start_pos = input_pos[0].item()
        for layer in self.layers:
            x = layer(x, start_pos)
        return x


def test_an_unbacked_symbol_another_region_binds_runs_stock() -> None:
    program = _cached_program(SharedPosition(), torch.tensor([0]))
    why = "update_cache uses u0, which the rest binds"
    assert program_regions(program) == (None, why)


class Growing(Caching):
    """Positioned over a dynamic sequence: update_cache's check `start_pos + seq_len <= 8`
    becomes an assertion of a backed and an unbacked symbol together (`s27 + u0 <= 8`, its `add`
    of the rest's length binding and the layer's `.item()`)."""

    def forward(self, x: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        length = x.shape[1]
        q, k, v = (linear(x).view(1, length, 2, 16) for linear in self.qkv)
        at = self.position(input_pos[0].item())
        torch.ops.llama.update_cache(k, self.k_cache, at)
        torch.ops.llama.update_cache(v, self.v_cache, at)
        y = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, at, None, 0.0, True)
        return x + self.out(y.reshape(1, length, 32))

    def position(self, start_pos: Any) -> Any:
        return start_pos


def _growing_program(
    layer: type[nn.Module] = Growing, strict: bool = False
) -> torch.export.ExportedProgram:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 (registers llama's ops)

    torch.manual_seed(0)
    stack = PositionedStack(layer).eval()
    length = torch.export.Dim("length", min=1, max=7)
    with torch.no_grad():
        return torch.export.export(
            stack,
            (torch.randn(1, 4, 32), torch.tensor([0])),
            dynamic_shapes=({1: length}, None),
            strict=strict,
        )


def test_an_assertion_of_a_dynamic_length_and_start_pos_is_generated_by_region() -> None:
    """Each layer's `s27 + u0 <= 8`: its `add`, comparison and assertion are the replays' own
    (each its own debug handle, placed after its `.item()` as in stock's), reading the rest's
    binding of the length, which the rest's template makes first, as stock's graph has it. The
    program's range constraints are its ShapeEnv's, as stock's (`s27: [2, 7]`, export's is
    `[1, 7]`), but for the replays' fresh unbacked symbols, which fewer replays number otherwise;
    every delegate's partition key is stock's (its own graph's symbols alone)."""
    made = _growing_program()
    targets = [str(node.target) for node in made.graph.nodes]
    assert "<built-in function add>" in targets and targets.count("aten.item.default") == 3
    assert str(made.range_constraints[_length(made)]) == "VR[1, 7]"
    edges: list[Any] = []
    stock, mine, runs = regional_and_stock(made, edges=edges, again=_growing_program)
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=4, templates=2, stock_because=None)]
    stock_ranges, mine_ranges = (_kept_ranges(e.exported_program()) for e in edges)
    assert mine_ranges == stock_ranges and mine_ranges[0] == ("s27", "VR[2, 7]")
    stock_keys, mine_keys = (partition_keys(e.exported_program()) for e in edges)
    assert len(mine_keys) > 1 and mine_keys == stock_keys


def _length(program: torch.export.ExportedProgram) -> Any:
    [length] = [s for s in program.range_constraints if str(s).startswith("s")]
    return length


def _kept_ranges(program: torch.export.ExportedProgram) -> list[tuple[str, str]]:
    """The range constraints of the backed symbols and of export's unbacked ones (u0-u2): all
    but the replays' fresh unbacked symbols."""
    export_made = {"u0", "u1", "u2"}
    return sorted(
        (str(s), str(r))
        for s, r in program.range_constraints.items()
        if str(s).startswith("s") or str(s) in export_made
    )


class Halved(Growing):
    """Growing at half the position it reads: a floor division of the unbacked symbol, which
    the argument does not cover."""

    def position(self, start_pos: Any) -> Any:
        return start_pos // 2


def test_a_sym_op_the_argument_does_not_cover_runs_stock() -> None:
    found, why = program_regions(_growing_program(Halved))
    assert found is None and why == "layers.0 calls <built-in function floordiv>"


def test_templates_binding_unbacked_symbols_are_kept_and_read_back(tmp_path: Path) -> None:
    """Optimum's recipe exported strict: each layer binds export's unbacked symbols (`.item()`),
    its replays bind fresh ones bounded by update_cache's checks, an assertion mixes one with
    the rest's length (`s27 + u0 <= 8`), and strict export's source_fn_stack names
    `torch.ops.llama.update_cache`. The store writes export's symbols by their place among the
    region's bindings and the replays' in order with their ranges (template_symbols.py): a
    build of a fresh export reads every template back, each layer with its own symbols and
    assertions, and its bytes and partition keys are stock's (before, "the symbol u32 is not
    backed" left each layer's template unstored)."""

    def program() -> torch.export.ExportedProgram:
        return _growing_program(strict=True)

    edges: list[Any] = []
    with torch.no_grad():
        stock = lowered(program(), None, edges)
        store = BlobStore(tmp_path / "cache")
        first, second = TemplateStore(store), TemplateStore(store)
        made = lowered_through(program(), first)
        read = lowered_through(program(), second, edges)
    assert sha256(made[0]) == sha256(read[0]) == sha256(stock)
    assert made[1] == [RegionalRun(4, 2, None, reused=0)] and first.stored == 2
    assert read[1] == [RegionalRun(4, 2, None, reused=2)] and second.stored == 0
    stock_edge, read_edge = (edge.exported_program() for edge in edges)
    assert partition_keys(read_edge) == partition_keys(stock_edge)
