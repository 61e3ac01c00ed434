"""One linear layer: built once through the daemon before anything is measured."""

import torch


def make():
    return torch.nn.Linear(4, 4).eval(), (torch.zeros(1, 4),)
