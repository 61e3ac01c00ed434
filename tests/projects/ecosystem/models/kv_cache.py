"""A static KV cache's shape: a projection written into a buffer in place (`index_copy_`), read
back. Exported in grad mode, the buffer's update carries requires_grad (strict export) or fails
(non-strict: "a leaf Variable that requires grad is being used in an in-place operation")."""

import torch
from torch import nn

from lowerd import Method


class Cached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.key = nn.Linear(16, 16)
        self.out = nn.Linear(16, 16)
        self.register_buffer("cache", torch.zeros(1, 8, 16), persistent=False)

    def forward(self, x: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(1, cache_position, self.key(x))
        return self.out(self.cache[:, : x.shape[1]] * 2)


def make() -> Method:
    torch.manual_seed(0)
    example = {"x": torch.randn(1, 3, 16), "cache_position": torch.arange(3)}
    return Method(Cached().eval(), kwargs=example)
