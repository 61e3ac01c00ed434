"""An attention layer's transposes around a custom op's layout: two transposes that undo each
other, which ExecuTorch's RemoveRedundantTransposes removes (optimum's custom-SDPA export)."""

import torch
from torch import nn

from lowerd import Method


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(16, 16)
        self.out = nn.Linear(16, 16)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        batch, length, _ = hidden.shape
        heads = self.query(hidden).view(batch, length, 2, 8).transpose(1, 2)
        heads = torch.relu(heads.transpose(1, 2))  # back to the op's [B, S, H, D]
        return self.out(heads.reshape(batch, length, 16))


def make() -> Method:
    torch.manual_seed(0)
    return Method(Attention().eval(), kwargs={"hidden": torch.randn(1, 4, 16)})
