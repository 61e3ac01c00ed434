"""Entries that end their process in every way a user's model can."""

import os
import signal

import torch
from torch import nn


def ok():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval(), (torch.randn(2, 8),)


def exits():
    os._exit(1)


def killed():
    os.kill(os.getpid(), signal.SIGKILL)


def hangs():
    while True:
        pass


def hungry():
    hoard = []
    while True:
        hoard.append(bytearray(64 * 2**20))


def raises():
    raise RuntimeError("the model is broken")  # LINE-MARK: crashy.raises
