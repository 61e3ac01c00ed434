"""What the bench's model files share: the size switch and the module that torch.export sees."""

from __future__ import annotations

import torch
from torch import nn

# bench_real.py --small sets this to True in its copy: tiny configs, for a smoke run.
SMALL = False


class Logits(nn.Module):
    """A transformers model's logits: torch.export wants a module returning tensors, and a
    transformers model returns a ModelOutput."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs).logits
