"""The user's three-line wrapper around a library model (tinylib, under site-packages/), plus
int64 arithmetic that XNNPACK refuses for its dtype."""

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "site-packages"))

from tinylib.blocks import Stack  # noqa: E402


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = Stack(width=16, depth=3)

    def forward(self, x, positions):
        y = self.model(x)  # LINE-MARK: layers.call
        return y, positions + positions  # LINE-MARK: layers.int64


def make():
    torch.manual_seed(0)
    return Wrapper().eval(), (torch.randn(1, 4, 16), torch.arange(4))
