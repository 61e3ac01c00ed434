"""A Linear, a running sum XNNPACK leaves on the CPU (torch.cumsum: no partitioner config), a
Linear: two XNNPACK partitions and the portable cumsum kernel between them."""

import torch
from torch import nn


class Scan(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)  # LINE-MARK: scan.fc1
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc1(x)  # LINE-MARK: scan.first
        x = torch.cumsum(x, dim=1)  # LINE-MARK: scan.cumsum
        return self.fc2(x)


def make():
    torch.manual_seed(0)
    return Scan().eval(), (torch.randn(2, 8),)


def samples():
    """Two more input tuples: the bundled program's second and third test cases."""
    torch.manual_seed(1)
    return [(torch.randn(2, 8),), (torch.randn(2, 8),)]
