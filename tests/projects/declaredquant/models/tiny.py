"""A tiny float model: a convolution and a linear layer; [tool.lowerd] quantizes it."""

import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * 4 * 4, 8)

    def forward(self, x):
        return self.head(torch.relu(self.conv(x)).flatten(1))


def make():
    torch.manual_seed(0)
    return Tiny().eval(), (torch.randn(1, 3, 4, 4),)
