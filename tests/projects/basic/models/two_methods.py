"""Two methods, `encode` and `decode`, whose modules share one nn.Linear (one weight tensor)."""

import torch
from torch import nn


class Encode(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return torch.relu(self.shared(x))


class Decode(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared = shared
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        return self.out(self.shared(x))


def make():
    torch.manual_seed(0)
    shared = nn.Linear(8, 8)
    return {
        "encode": (Encode(shared).eval(), (torch.randn(2, 8),)),
        "decode": (Decode(shared).eval(), (torch.randn(2, 8),)),
    }
