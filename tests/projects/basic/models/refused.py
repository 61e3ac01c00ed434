"""Two ops XNNPACK leaves on the portable CPU kernels, between two delegated Linears.

- `x ** 3` is aten.pow.Tensor_Scalar, which XNNPACK only takes with exponent 2; its
  partitioner logs, on logger executorch.backends.xnnpack.partition.config.generic_node_configs
  at DEBUG: "WhyNoPartition: Node aten_pow_tensor_scalar was not partitioned because only
  support power == 2, got 3."
- torch.cumsum has no XNNPACK partitioner config at all, so nothing is logged for it.
"""

import torch
from torch import nn


class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc1(x)
        x = x**3  # LINE-MARK: refused.pow
        x = torch.cumsum(x, dim=1)  # LINE-MARK: refused.cumsum
        return self.fc2(x)


def make():
    torch.manual_seed(0)
    return Refused().eval(), (torch.randn(2, 8),)
