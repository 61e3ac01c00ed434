"""Regional edge generation for ExecuTorch's LLM ops (optimum-executorch's recipe, issue 31):
each byte test checks the regional path ran and the .pte is stock's; each fallback test a case
the argument does not cover."""

from __future__ import annotations

import torch
from torch import nn

from lowerd.lowering.region_edge import RegionalRun, program_regions

from regional import Stack, regional_and_stock
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
        q, k, v = (linear(x).view(1, 4, 2, 16) for linear in self.qkv)
        torch.ops.llama.update_cache(k, self.k_cache, 0)
        torch.ops.llama.update_cache(v, self.v_cache, 0)
        y = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, 0, None, 0.0, True)
        return x + self.out(y.reshape(1, 4, 32))


def _cached_program(stack: nn.Module) -> torch.export.ExportedProgram:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 (registers llama's ops)

    torch.manual_seed(0)
    with torch.no_grad():  # as ExecuTorch's exports: a cache written from grad is refused
        return torch.export.export(stack.eval(), (torch.randn(1, 4, 32),))


def test_layers_updating_their_own_caches_are_generated_by_region() -> None:
    program = _cached_program(Stack(Caching))
    targets = {str(node.target) for node in program.graph.nodes}
    assert "llama.update_cache.default" in targets
    stock, mine, runs = regional_and_stock(program)
    assert sha256(mine) == sha256(stock)
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
