"""Benchmark CNN: a ResNet-style stem and BLOCKS residual blocks on a 1x3xSIZExSIZE image.

Every op (conv with folded batch norm, relu, add, max pool, mean, linear) is delegated, so the
whole network is ONE XNNPACK partition: editing any weight re-preprocesses all of it. That is
the case the cache helps least, measured next to the transformer's many partitions.

bench/bench_build.py rewrites the UPPER_CASE constants below in its temp copy of this file.
"""

from __future__ import annotations

import torch
from torch import nn

BLOCKS = 6
WIDTH = 32
SIZE = 64
CLASSES = 10
# The weight edit: scales every parameter of block EDITED_BLOCK at init.
EDITED_BLOCK = 3
EDITED_BLOCK_GAIN = 1.0


def conv_bn(cin: int, cout: int, stride: int = 1, kernel: int = 3) -> nn.Sequential:
    conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """relu(x + bn(conv(relu(bn(conv(x)))))), with a strided 1x1 shortcut when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(conv_bn(cin, cout, stride), nn.ReLU(), conv_bn(cout, cout))
        reshape = stride != 1 or cin != cout
        self.shortcut = conv_bn(cin, cout, stride, kernel=1) if reshape else nn.Identity()
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, blocks: int, width: int, classes: int):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, width), nn.ReLU(), nn.MaxPool2d(2))
        layers, channels = [], width
        for i in range(blocks):
            # Halve the resolution and double the channels every second block.
            stride = 2 if i % 2 == 1 else 1
            out = channels * stride
            layers.append(BasicBlock(channels, out, stride))
            channels = out
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        # XNNPACK averages only with keepdim (global average pooling); without it, mean stays on
        # the CPU and splits the network in two.
        return self.head(torch.flatten(x.mean(dim=(2, 3), keepdim=True), 1))


def _randomize_batch_norm(model: nn.Module) -> None:
    # Fresh statistics are identity; random ones make folding them into the convs real work.
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.5, 0.5)
            module.running_var.uniform_(0.5, 1.5)


def make() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    model = ResNet(BLOCKS, WIDTH, CLASSES).eval()
    with torch.no_grad():
        _randomize_batch_norm(model)
        for parameter in model.blocks[EDITED_BLOCK].parameters():
            parameter.mul_(EDITED_BLOCK_GAIN)
    return model, (torch.randn(1, 3, SIZE, SIZE),)
