"""Three layers of torch's own nn.RMSNorm and a Linear: the norm's mean and add are made inside
torch.nn (normalization.py, RMSNorm.forward), outside the project, and XNNPACK refuses them, so
every layer's Linear is a partition of its own. The user's line is the layer's forward."""

import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(8)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(self.norm(x))  # LINE-MARK: norms.norm


class Norms(nn.Module):  # LINE-MARK: norms.module
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def make():  # LINE-MARK: norms.entry
    torch.manual_seed(0)
    return Norms().eval(), (torch.randn(2, 8),)
