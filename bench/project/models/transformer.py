"""Benchmark transformer: BLOCKS pre-norm encoder blocks of width DIM over SEQ tokens.

The blocks follow examples/models/blocks.py so that XNNPACK takes every matmul, norm and
activation: layer norm is spelled with mean/rsqrt, attention uses torch.bmm on 3-D tensors and
q, k, v are separate nn.Linear layers. A fully delegated graph is one XNNPACK partition, though,
which would make the cache all-or-nothing. Real models are rarely fully delegated, so each block
also clamps its activations at CLAMPS_PER_BLOCK points with tensor bounds (an overflow guard):
XNNPACK only takes clamp with scalar bounds, so each clamp stays on the CPU and splits the graph.

bench/bench_build.py rewrites the UPPER_CASE constants below in its temp copy of this file: the
sizes from its options, and EDITED_BLOCK_GAIN for the "weight edit" scenario. bench_incremental.py
and bench_editor.py also set EXTRA_OP_BLOCKS, for their "structural edit" scenarios.
"""

from __future__ import annotations

import math

import torch
from torch import nn

BLOCKS = 6
DIM = 256
SEQ = 64
HEADS = 4
CLAMPS_PER_BLOCK = 7
# The weight edit: scales every parameter of block EDITED_BLOCK at init.
EDITED_BLOCK = 3
EDITED_BLOCK_GAIN = 1.0
# The structural edit: each block listed here gets one extra op (a tanh on its MLP's hidden
# activations), which lands inside an XNNPACK partition. Empty: the model as before.
EXTRA_OP_BLOCKS = ()

# Where a block clamps, in data-flow order; the first CLAMPS_PER_BLOCK are used (all 7 give
# 6 * 7 + 1 = 43 partitions at 6 blocks: every clamp starts a new one).
CLAMP_SITES = ("ln1", "qkv", "scores", "context", "attn_out", "ln2", "hidden")


class Clamp(nn.Module):
    """clamp(x, -limit, limit) with tensor bounds: aten.clamp.Tensor, which XNNPACK refuses."""

    def __init__(self, limit: float = 6.0e4):
        super().__init__()
        self.register_buffer("low", torch.tensor(-limit))
        self.register_buffer("high", torch.tensor(limit))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, self.low, self.high)


class LayerNorm(nn.Module):
    """Layer norm from mean/rsqrt over a (b, t, 1, d) view: XNNPACK's mean takes 4-D inputs."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        x4 = x.reshape(b, t, 1, d)
        centered = x4 - x4.mean(dim=(2, 3), keepdim=True)
        var = (centered * centered).mean(dim=(2, 3), keepdim=True)
        normed = centered * torch.rsqrt(var + self.eps)
        return normed.reshape(b, t, d) * self.weight + self.bias


class Block(nn.Module):
    """Pre-norm encoder block: x + attention(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, dim: int, heads: int, clamps: int, extra_op: bool = False):
        super().__init__()
        self.extra_op = extra_op
        self.heads, self.head_dim = heads, dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.ln1, self.ln2 = LayerNorm(dim), LayerNorm(dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.fc1, self.act, self.fc2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.clamps = nn.ModuleDict({site: Clamp() for site in CLAMP_SITES[:clamps]})

    def clamp(self, site: str, x: torch.Tensor) -> torch.Tensor:
        return self.clamps[site](x) if site in self.clamps else x

    def heads_first(self, x: torch.Tensor, b: int, t: int) -> torch.Tensor:
        # (b, t, dim) -> (b * heads, t, head_dim): bmm on 3-D tensors stays on XNNPACK
        x = x.reshape(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)
        return self.clamp("qkv", x.reshape(b * self.heads, t, self.head_dim))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self.heads_first(self.q(x), b, t)
        k = self.heads_first(self.k(x), b, t)
        v = self.heads_first(self.v(x), b, t)
        scores = self.clamp("scores", torch.bmm(q, k.permute(0, 2, 1)) * self.scale)
        context = self.clamp("context", torch.bmm(torch.softmax(scores, dim=-1), v))
        context = context.reshape(b, self.heads, t, self.head_dim).permute(0, 2, 1, 3)
        return self.out(context.reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.clamp("attn_out", x + self.attention(self.clamp("ln1", self.ln1(x))))
        hidden = self.clamp("hidden", self.act(self.fc1(self.clamp("ln2", self.ln2(x)))))
        if self.extra_op:  # between the "hidden" clamp and fc2: inside one XNNPACK partition
            hidden = torch.tanh(hidden)
        return x + self.fc2(hidden)


class Transformer(nn.Module):
    def __init__(self, blocks: int, dim: int, heads: int, clamps: int):
        super().__init__()
        self.blocks = nn.Sequential(
            *[Block(dim, heads, clamps, i in EXTRA_OP_BLOCKS) for i in range(blocks)]
        )
        self.norm = LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.blocks(x))


def make() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    model = Transformer(BLOCKS, DIM, HEADS, CLAMPS_PER_BLOCK).eval()
    with torch.no_grad():
        for parameter in model.blocks[EDITED_BLOCK].parameters():
            parameter.mul_(EDITED_BLOCK_GAIN)
    return model, (torch.randn(1, SEQ, DIM),)
