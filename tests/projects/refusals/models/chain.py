"""Linear -> x**3 -> Linear, after a cumsum over the (larger) input.

XNNPACK refuses both the cumsum (no support) and the pow (only power == 2). The pow splits the
delegated chain into two partitions; the cumsum, at the head, splits nothing although it leaves
more elements on the CPU: the pow must rank first.
"""

import torch
from torch import nn


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 4)
        self.fc2 = nn.Linear(4, 4)

    def forward(self, x):
        x = torch.cumsum(x, dim=1)  # LINE-MARK: chain.cumsum
        x = self.fc1(x)
        x = x**3  # LINE-MARK: chain.pow
        return self.fc2(x)


def make():
    torch.manual_seed(0)
    return Chain().eval(), (torch.randn(2, 64),)
