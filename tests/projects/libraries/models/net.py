"""Linear + ReLU; writes to build/warm.log whether iniconfig was imported before this file."""

import sys
from pathlib import Path

WARM = "iniconfig" in sys.modules  # kept warm by the fork server since an earlier build?

import iniconfig  # noqa: E402,F401
import torch  # noqa: E402
from torch import nn  # noqa: E402


def make():
    log = Path(__file__).parent.parent / "build" / "warm.log"  # out_dir: not an input
    log.parent.mkdir(exist_ok=True)
    with log.open("a") as file:
        file.write(f"{WARM}\n")
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval(), (torch.randn(2, 8),)
