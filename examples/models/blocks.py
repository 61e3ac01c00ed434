"""Transformer building blocks written with ops XNNPACK delegates.

`aten.native_layer_norm` has no XNNPACK partitioner config (ExecuTorch 1.5), and `a @ b` on
3-D/4-D tensors exports as `expand_copy` + `bmm`, and XNNPACK refuses `expand_copy`. So the
layer norm here is spelled with mean/sub/mul/rsqrt and attention calls `torch.bmm` on
(batch * heads, seq, head_dim) tensors: every op below lands in an XNNPACK delegate.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class LayerNorm(nn.Module):
    """LayerNorm over the last dim of a (batch, seq, dim) tensor, XNNPACK-delegable.

    XNNPACK's mean.dim only averages the two innermost dims of a 4-D tensor, so the input is
    viewed as (batch, seq, 1, dim) and averaged over dims (2, 3).
    """

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        x4 = x.reshape(b, t, 1, d)
        mean = x4.mean(dim=(2, 3), keepdim=True)
        centered = x4 - mean
        var = (centered * centered).mean(dim=(2, 3), keepdim=True)
        normed = centered * torch.rsqrt(var + self.eps)
        return normed.reshape(b, t, d) * self.weight + self.bias


class SelfAttention(nn.Module):
    """Multi-head self-attention: softmax(q k^T / sqrt(head_dim)) v, then an output projection.

    q, k and v are three nn.Linear layers rather than one fused layer split with `chunk`:
    `chunk` exports as `split_with_sizes_copy`, which XNNPACK does not delegate.
    """

    def __init__(self, dim: int, heads: int):
        super().__init__()
        assert dim % heads == 0
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def _split_heads(self, x: torch.Tensor, b: int, t: int) -> torch.Tensor:
        # (b, t, dim) -> (b * heads, t, head_dim)
        x = x.reshape(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)
        return x.reshape(b * self.heads, t, self.head_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q = self._split_heads(self.q(x), b, t)
        k = self._split_heads(self.k(x), b, t)
        v = self._split_heads(self.v(x), b, t)
        scores = torch.bmm(q, k.permute(0, 2, 1)) * self.scale
        attn = torch.softmax(scores, dim=-1)
        ctx = torch.bmm(attn, v)  # (b * heads, t, head_dim)
        ctx = ctx.reshape(b, self.heads, t, self.head_dim).permute(0, 2, 1, 3).reshape(b, t, d)
        return self.out(ctx)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.ln1 = LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.ln2 = LayerNorm(dim)
        self.mlp = MLP(dim, mlp_ratio * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
