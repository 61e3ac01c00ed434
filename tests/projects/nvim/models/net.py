"""Linear → RMSNorm → `x ** 3` → `torch.cumsum` → Linear: XNNPACK refuses the pow (it only takes
exponent 2) and has no support for cumsum. tests/test_neovim.py rewrites the pow line to `x * x`,
which XNNPACK takes, and expects only the cumsum to stay refused. torch's own nn.RMSNorm makes a
mean and an add XNNPACK refuses inside torch.nn: their warning at the norm line links that
library line (:LowerdRelated)."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.norm = nn.RMSNorm(8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc1(x)
        x = self.norm(x)  # LINE-MARK: nvim.norm
        x = x**3  # LINE-MARK: nvim.pow
        x = torch.cumsum(x, dim=1)  # LINE-MARK: nvim.cumsum
        return self.fc2(x)


def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(2, 8),)
