"""The entry function raises while building the model."""

import torch
from torch import nn


def make():
    torch.manual_seed(0)
    model = nn.Linear(8, 8).eval()
    width = 0
    if width <= 0:
        raise ValueError(f"width must be positive, got {width}")  # LINE-MARK: raises
    return model, (torch.randn(2, width),)
