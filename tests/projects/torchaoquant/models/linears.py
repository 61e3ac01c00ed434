"""Tiny float models of linears for torchao's 8da4w / 8da8w: fc1 and fc2 take in_features 64 and
32 (multiples of the group size 32), fc3 takes 20 (not one) unless the model is aligned."""

import torch
from torch import nn

FC2_SCALE = 1.0  # the one line tests edit (to 0.5): only fc2's weight changes (test_intx_memo.py)


class Net(nn.Module):
    def __init__(self, tail_features):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, tail_features)
        self.fc3 = nn.Linear(tail_features, 8)
        with torch.no_grad():
            self.fc2.weight.mul_(FC2_SCALE)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def make():
    """fc3 takes 20 features: per_group 32 quantizes it only if the filter lets it (and fails)."""
    torch.manual_seed(0)
    return Net(20).eval(), (torch.randn(2, 64),)


def make_aligned():
    """Every in_features a multiple of 32: torchao's default filter quantizes all three."""
    torch.manual_seed(0)
    return Net(32).eval(), (torch.randn(2, 64),)


def make_two():
    """Two methods whose modules share one nn.Linear(32, 32): it is quantized once."""
    torch.manual_seed(0)
    shared = nn.Linear(32, 32)
    return {
        "encode": (nn.Sequential(shared, nn.ReLU()).eval(), (torch.randn(2, 32),)),
        "decode": (nn.Sequential(shared, nn.Linear(32, 8)).eval(), (torch.randn(2, 32),)),
    }


class Block(nn.Module):
    """A Llama MLP block on hidden 32: both linears' in_features divide by the group size."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(32)
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32, bias=False)

    def forward(self, x):
        return x + self.down(torch.nn.functional.silu(self.up(self.norm(x))))


class Blocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(3))
        self.head = nn.Linear(32, 16)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def make_layers():
    """Three blocks of one structure and a head: regional edge generation's 8da4w case."""
    torch.manual_seed(0)
    return Blocks().eval(), (torch.randn(1, 4, 32),)
