"""Linear 8->8 + ReLU with a dynamic batch dimension (1..64)."""

import torch
from torch import nn
from torch.export import Dim


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    batch = Dim("batch", min=1, max=64)
    return model, (torch.randn(4, 8),), ({0: batch},)
