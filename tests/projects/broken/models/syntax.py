"""A syntax error on the marked line: loading this entry fails before make() exists."""

import torch
from torch import nn


def make():
    model = nn.Linear(8, 8).eval()
    example = = (torch.randn(2, 8),)  # LINE-MARK: syntax
    return model, example
