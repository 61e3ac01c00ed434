"""Data-dependent control flow: torch.export cannot trace a branch on a tensor's value."""

import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if x.sum() > 0:  # LINE-MARK: export_fail
            return self.fc(x)
        return -x


def make():
    torch.manual_seed(0)
    return Branchy().eval(), (torch.randn(2, 8),)
