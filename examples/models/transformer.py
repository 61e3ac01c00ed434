"""A small transformer encoder (2 blocks, d=64, 4 heads, seq 16) with one op XNNPACK refuses.

Everything in `models.blocks` is delegated to XNNPACK. The "position mixing" step below
uses `torch.cumsum` (a running average over the sequence), and XNNPACK has no cumsum kernel:
the delegation report shows `aten.cumsum` running on ExecuTorch's portable CPU kernels,
splitting the graph into an XNNPACK delegate before it and one after it.
"""

from __future__ import annotations

import torch
from torch import nn

from models.blocks import EncoderBlock, LayerNorm

SEQ = 16
IN_FEATURES = 32
DIM = 64
HEADS = 4
DEPTH = 2
CLASSES = 10


class PositionMixing(nn.Module):
    """Adds to each position the average of all positions up to it (a causal running mean)."""

    def __init__(self, seq: int):
        super().__init__()
        counts = torch.arange(1, seq + 1, dtype=torch.float32).reshape(1, seq, 1)
        self.register_buffer("inv_counts", 1.0 / counts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        running = torch.cumsum(x, dim=1)  # not delegated: XNNPACK has no cumsum
        return x + running * self.inv_counts


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(IN_FEATURES, DIM)
        self.mix = PositionMixing(SEQ)
        self.blocks = nn.Sequential(*[EncoderBlock(DIM, HEADS) for _ in range(DEPTH)])
        self.norm = LayerNorm(DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (1, SEQ, IN_FEATURES) -> per-token logits (1, SEQ, CLASSES)
        x = self.mix(self.embed(x))
        x = self.blocks(x)
        return self.head(self.norm(x))


def make():
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    example = (torch.randn(1, SEQ, IN_FEATURES),)
    return model, example
