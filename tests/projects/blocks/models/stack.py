"""BLOCKS (four) blocks of Linear -> GELU -> cumsum (not delegated) -> Linear: two partitions
per block."""

import torch
from torch import nn

BLOCKS = 4  # tests set this to stack fewer blocks
EXTRA_OP_IN_BLOCK = -1  # tests set this to insert one more op into that block


class Block(nn.Module):
    def __init__(self, extra_op: bool):
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 16)
        self.extra_op = extra_op

    def forward(self, x):
        x = nn.functional.gelu(self.fc1(x))
        if self.extra_op:
            x = torch.tanh(x)
        x = torch.cumsum(x, dim=1)
        return self.fc2(x) + x


def make():
    torch.manual_seed(0)
    blocks = [Block(i == EXTRA_OP_IN_BLOCK) for i in range(BLOCKS)]
    torch.manual_seed(0)  # the same weights whichever block has the extra op
    for block in blocks:
        block.fc1.reset_parameters()
        block.fc2.reset_parameters()
    return nn.Sequential(*blocks).eval(), (torch.randn(2, 16),)
