"""Entries that end their process in every way a user's model can."""

import os
import signal
import sys
import threading

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
    # Asleep, not spinning: the build that must stop it, and the tests beside it, keep the CPU.
    threading.Event().wait()


def parallel_ops():
    # Big enough for ATen's parallel_for: run in a fork of a server that had started GNU
    # OpenMP's pool, the worker hangs at its first barrier (tests/test_workers.py).
    torch.ones(4_000_000).mul_(2)
    torch.ones(1024, 1024) @ torch.ones(1024, 1024)
    return ok()


def hungry():
    hoard = []
    while True:
        hoard.append(bytearray(64 * 2**20))


def raises():
    raise RuntimeError("the model is broken")  # LINE-MARK: crashy.raises


class _ExitsInForward(nn.Module):
    def forward(self, x):
        os._exit(3)


def exits_in_forward():  # LINE-MARK: crashy.exits_in_forward
    return _ExitsInForward(), (torch.randn(2, 8),)


class _Chatty(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        print("CHATTY-FORWARD printed while exporting")
        return self.fc(x).relu()


def chatty():
    print("CHATTY-MAKE printed by the entry")
    print(f"CHATTY-HASH {hash('lowerd')}")  # the string hash seed the worker runs with
    os.write(1, b"CHATTY-FD1 written to file descriptor 1\n")  # below Python's sys.stdout
    torch.manual_seed(0)
    return _Chatty().eval(), (torch.randn(2, 8),)


class _Level(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x) + 1


def _chain(levels):
    module = nn.Linear(8, 8)
    for _ in range(levels):
        module = _Level(module)
    return module, (torch.randn(2, 8),)  # no .eval(): train() recurses, 3000 deep


def nested():  # LINE-MARK: crashy.nested
    # torch.export follows it one call per level: past Python's recursion limit at ~110 levels.
    return _chain(3000)


def nested_past_the_limit():
    # The limit raised: torch.export then follows the chain for many minutes. Build it only with
    # a timeout.
    sys.setrecursionlimit(100_000)
    return _chain(3000)
