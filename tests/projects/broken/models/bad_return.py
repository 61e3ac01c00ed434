"""The entry returns a bare module instead of (module, example_args)."""

import torch
from torch import nn


def make():  # LINE-MARK: bad_return
    torch.manual_seed(0)
    model = nn.Linear(8, 8).eval()
    return model  # LINE-MARK: bad_return.return
