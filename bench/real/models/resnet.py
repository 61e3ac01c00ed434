"""ResNet-18 from transformers, random weights from its config (nothing downloaded).

Every op is delegated: the whole network is one XNNPACK partition.
"""

from __future__ import annotations

import torch
from transformers import ResNetConfig, ResNetForImageClassification

from models.common import SMALL, Logits


def make():
    torch.manual_seed(0)
    # ResNet-18 (basic blocks [2, 2, 2, 2]), or a tiny one
    small = ([1, 1], [16, 32], 32)
    depths, widths, size = small if SMALL else ([2, 2, 2, 2], [64, 128, 256, 512], 224)
    config = ResNetConfig(
        layer_type="basic",
        embedding_size=widths[0],
        hidden_sizes=widths,
        depths=depths,
        num_labels=1000,
    )
    model = ResNetForImageClassification(config).eval()
    model = Logits(model).eval()
    return model, (torch.randn(1, 3, size, size),)
