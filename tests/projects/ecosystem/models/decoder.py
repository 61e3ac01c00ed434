"""A decoder's shape, as optimum-executorch exports one: keyword inputs `input_ids` and
`cache_position`, a dynamic sequence length, token and position embeddings (left on the CPU:
XNNPACK takes no embedding), a mask from `arange`, a Linear head."""

import torch
from torch import nn
from torch.export import Dim

from lowerd import Method


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(32, 16)
        self.positions = nn.Embedding(8, 16)
        self.head = nn.Linear(16, 32)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        hidden = self.tokens(input_ids) + self.positions(cache_position)[None]
        mask = torch.arange(input_ids.shape[1]) <= cache_position
        return self.head(hidden * mask[None, :, None])


def inputs() -> dict[str, torch.Tensor]:
    return {"input_ids": torch.zeros(1, 3, dtype=torch.long), "cache_position": torch.arange(3)}


def shapes() -> dict[str, dict[int, Dim]]:
    seq = Dim("seq_length_dim", max=7)
    return {"input_ids": {1: seq}, "cache_position": {0: seq}}


def make() -> Method:  # LINE-MARK: decoder.make
    torch.manual_seed(0)
    return Method(Decoder().eval(), kwargs=inputs(), dynamic_shapes=shapes())


def make_positional() -> tuple[nn.Module, tuple[torch.Tensor, ...], dict[str, dict[int, Dim]]]:
    """The same program's inputs given by position: another input structure."""
    torch.manual_seed(0)
    return Decoder().eval(), tuple(inputs().values()), shapes()
