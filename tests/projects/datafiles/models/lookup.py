"""Embedding(16, 8) -> Linear 8->8: XNNPACK takes the Linear, the embedding (and its weight, a
constant of the top-level program) stays on the CPU, so external_constants moves it to a .ptd."""

import torch
from torch import nn


class Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.proj = nn.Linear(8, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.embed(ids))


def make():
    torch.manual_seed(0)
    return Lookup().eval(), (torch.tensor([[1, 2, 3]]),)
