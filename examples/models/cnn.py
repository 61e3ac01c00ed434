"""A small CNN on 1x3x32x32 images; every op is delegated to XNNPACK.

Conv + BatchNorm pairs are fused by the XNNPACK partitioner (the model is in eval mode), and
global average pooling is a 4-D mean over (H, W) with keepdim, which XNNPACK supports.
"""

from __future__ import annotations

import torch
from torch import nn


def conv_bn_relu(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            conv_bn_relu(3, 16),
            nn.MaxPool2d(2),  # 32 -> 16
            conv_bn_relu(16, 32),
            nn.MaxPool2d(2),  # 16 -> 8
            conv_bn_relu(32, 64),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def make():
    torch.manual_seed(0)
    model = SmallCNN().eval()
    # Non-trivial BatchNorm statistics, so fusing them into the convolutions is not a no-op.
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return model, (torch.randn(1, 3, 32, 32),)
