"""Imports a sibling module relatively, so the entry must be imported as part of tiny_pkg."""

import torch
from torch import nn

from .layers import linear_relu


def make():
    torch.manual_seed(0)
    model = nn.Sequential(linear_relu(8), nn.Linear(8, 2)).eval()
    return model, (torch.randn(2, 8),)
