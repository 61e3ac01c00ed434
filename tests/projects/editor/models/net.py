"""Linear 8->8 + ReLU, fully delegated. Tests replace the marked lines to break it in turn:
an op XNNPACK refuses, data-dependent control flow, a worker that exits, is killed or hangs."""

import torch
from torch import nn


class Net(nn.Module):  # LINE-MARK: net.module
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc(x)  # LINE-MARK: net.linear
        x = x  # LINE-MARK: net.edit
        return torch.relu(x)


def make():  # LINE-MARK: net.entry
    torch.manual_seed(0)  # LINE-MARK: net.make
    return Net().eval(), (torch.randn(2, 8),)
