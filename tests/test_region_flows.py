"""Regional edge generation (lowering/region_edge.py) on what LLM exports carry: KV caches written
in place by each layer, a dynamic sequence length, torchao's 8da4w linears and ExecuTorch's
custom SDPA. Each gives the stock run's bytes by region.

Stock here is a plain ExecuTorch run with nothing of lowerd's installed (tests/regional.py).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lowerd.lowering.edge_speedups import EdgeSpeedups
from lowerd.lowering.region_edge import CUSTOM_OPS, QDQ_OPS, RegionalEdge, RegionalRun

from helpers import PROJECTS
from known_stock import known_or_live, program_digest
from regional import Stack, lowered, regional_against_stock
from stock import call_entry, sha256


class Cached(nn.Module):
    """A layer with its own caches written in place (as ExecuTorch's llama KVCache or
    transformers' StaticCache, by index_copy_), and a step counter whose write nothing reads.
    Written in another order than registered (the value cache first, the counter last), so
    the BUFFER_MUTATION outputs' order (by placeholder) is not the order of the writes."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("k_cache", torch.zeros(6, 8), persistent=False)
        self.register_buffer("v_cache", torch.zeros(6, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.linear(x)
        positions = torch.arange(4)  # as a KV cache's input_pos
        self.v_cache.index_copy_(0, positions, k * 2)
        self.k_cache.index_copy_(0, positions, k)
        self.steps.add_(1)
        return torch.relu(k @ self.k_cache.t() @ self.v_cache)


def _against_known_stock(
    name: str, program: Any, edges: list[Any]
) -> tuple[str, str, list[RegionalRun]]:
    """regional_against_stock (stock's digest from tests/stock_digests.json where it holds this
    program, else lowered live), the regional lowering's manager appended to `edges`."""
    stock = known_or_live(name, program_digest(program), lambda: sha256(lowered(program)))
    regional = RegionalEdge()
    with EdgeSpeedups(None).installed(), regional.installed():
        mine = lowered(program, None, edges)
    return stock, sha256(mine), regional.runs


def test_layers_writing_their_own_caches_are_generated_by_region() -> None:
    """Each layer's cut holds its caches as buffer inputs with their writes; the assembly makes
    the BUFFER_MUTATION outputs in the order of the buffers' placeholders, as stock's
    functionalizing replay does (by the order of the writes, the bytes differ)."""
    torch.manual_seed(0)
    with torch.no_grad():  # as ExecuTorch's exports: a cache written from grad is refused
        program = torch.export.export(Stack(Cached).eval(), (torch.randn(4, 8),))
    edges: list[Any] = []
    stock, mine, runs = _against_known_stock("own-caches-written", program, edges)
    assert mine == stock
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]
    outputs = edges[-1].exported_program().graph_signature.output_specs
    assert [spec.target for spec in outputs if spec.kind.name == "BUFFER_MUTATION"] == [
        f"layers.{i}.{name}" for i in range(3) for name in ("steps", "k_cache", "v_cache")
    ]


def test_a_dynamic_sequence_is_generated_by_region() -> None:
    """A Llama with a dynamic sequence length (backed `s0`): the rest binds it once after the
    placeholders and every layer reads that binding; each layer template reads it as its cut's
    first user input. The .pte (upper-bound sizes, the sym_size ops outside the delegates) is
    the stock script's."""
    from architectures import dynamic_llama

    program = dynamic_llama()
    assert program.range_constraints  # dynamic indeed
    stock, mine, runs = regional_against_stock("dynamic-llama", program)
    assert mine == stock
    assert runs == [RegionalRun(regions=3, templates=2, stock_because=None)]


def test_8da4w_linears_are_generated_by_region() -> None:
    """tests/projects/torchaoquant's three Llama MLP blocks and head, quantized as optimum's
    recipe does (8da4w, hqq, linear_divisible) and exported non-strict: torchao's
    choose_qparams/quantize/dequantize affine ops around each linear, the head's chain reading
    the last layer's output. The .pte is the stock script's, by region."""
    from testkit.stock_recipe import optimum_quantize_model

    model, example = call_entry(PROJECTS / "torchaoquant", "models/linears.py:make_layers")
    optimum_quantize_model(model, "8da4w")
    with torch.no_grad():
        program = torch.export.export(model, example, strict=False)
    assert any(str(node.target) in QDQ_OPS for node in program.graph.nodes)
    stock, mine, runs = regional_against_stock("8da4w-linears", program)
    assert mine == stock
    assert runs == [RegionalRun(regions=4, templates=2, stock_because=None)]


class Attention(nn.Module):
    """Attention by ExecuTorch's custom_sdpa (optimum's recipe's), start_pos a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.out = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (linear(x).view(1, 4, 2, 16) for linear in self.qkv)
        y = torch.ops.llama.custom_sdpa(q, k, v, 0, None, 0.0, True)
        return x + self.out(y.reshape(1, 4, 32))


def test_custom_sdpa_with_a_constant_start_pos_is_generated_by_region() -> None:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 (registers llama's ops)

    torch.manual_seed(0)
    program = torch.export.export(Stack(Attention).eval(), (torch.randn(1, 4, 32),))
    assert any(str(node.target) in CUSTOM_OPS for node in program.graph.nodes)
    stock, mine, runs = regional_against_stock("custom-sdpa-constant-start-pos", program)
    assert mine == stock
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]
