"""Linear 8->8 + ReLU, fully delegated. Tests replace the marked lines to break it in turn:
an op XNNPACK refuses, data-dependent control flow, a worker that exits, is killed or hangs, a
head that XNNPACK refuses (Running) or that does not export (Branching) swapped in for the
Identity."""

import torch
from torch import nn


class Running(nn.Module):
    """A running sum: XNNPACK has no cumsum."""

    def forward(self, x):
        return torch.cumsum(x, dim=1)  # LINE-MARK: net.running


class Branching(nn.Module):
    """Control flow on a tensor's value: torch.export refuses it."""

    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


class Net(nn.Module):  # LINE-MARK: net.module
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.head = nn.Identity()  # LINE-MARK: net.head

    def forward(self, x):
        x = self.fc(x)  # LINE-MARK: net.linear
        x = x  # LINE-MARK: net.edit
        return self.head(torch.relu(x))


def make():  # LINE-MARK: net.entry
    torch.manual_seed(0)  # LINE-MARK: net.make
    return Net().eval(), (torch.randn(2, 8),)
