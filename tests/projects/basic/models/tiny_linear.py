"""Linear 8->8 + ReLU: fully delegated to XNNPACK."""

import torch
from torch import nn


def make():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    return model, (torch.randn(2, 8),)
