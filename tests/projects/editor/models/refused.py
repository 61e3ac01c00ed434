"""Two ops XNNPACK leaves on the CPU between two delegated Linears: `x ** 3` (XNNPACK takes only
power 2) and torch.cumsum (no XNNPACK support at all)."""

import torch
from torch import nn


class Refused(nn.Module):  # LINE-MARK: refused.module
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc1(x)  # LINE-MARK: refused.linear
        x = x**3  # LINE-MARK: refused.pow
        x = torch.cumsum(x, dim=1)  # LINE-MARK: refused.cumsum
        return self.fc2(x)


def make():  # LINE-MARK: refused.entry
    torch.manual_seed(0)
    return Refused().eval(), (torch.randn(2, 8),)
