"""An MLP whose batch dimension is dynamic (1..64): one .pte serves every batch size.

Loaded through a module-path entry, `models.dynamic_mlp:make`, instead of a file path.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.export import Dim


class MLP(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 64, out: int = 4):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make():
    torch.manual_seed(0)
    model = MLP().eval()
    # The example batch is 8, not 1: torch.export would specialize a size-1 dimension.
    example = (torch.randn(8, 16),)
    batch = Dim("batch", min=1, max=64)
    dynamic_shapes = ({0: batch},)
    return model, example, dynamic_shapes
