from torch import nn


def linear_relu(n: int) -> nn.Module:
    return nn.Sequential(nn.Linear(n, n), nn.ReLU())
