"""A two-method program, `encode` and `decode`, whose modules share one weight tensor.

The encoder projects features into a latent space with the shared matrix W, the decoder
maps latents back with the same W (tied weights, as in a tied autoencoder or a language
model whose output projection reuses its embedding). Both methods go into one .pte.
"""

from __future__ import annotations

import torch
from torch import nn

FEATURES = 32
LATENT = 16


class Encoder(nn.Module):
    def __init__(self, shared: nn.Linear):
        super().__init__()
        self.pre = nn.Linear(FEATURES, FEATURES)
        self.shared = shared  # the same nn.Linear object as Decoder.shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (batch, FEATURES) -> (batch, LATENT): x @ W^T
        return torch.tanh(self.shared(torch.relu(self.pre(x))))


class Decoder(nn.Module):
    def __init__(self, shared: nn.Linear):
        super().__init__()
        self.shared = shared
        self.post = nn.Linear(FEATURES, FEATURES)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        # (batch, LATENT) -> (batch, FEATURES): z @ W, the transpose of the encoder's map
        h = torch.mm(z, self.shared.weight)
        return self.post(torch.relu(h))


def make():
    torch.manual_seed(0)
    shared = nn.Linear(FEATURES, LATENT, bias=False)  # W: (LATENT, FEATURES)
    encoder = Encoder(shared).eval()
    decoder = Decoder(shared).eval()
    assert encoder.shared.weight is decoder.shared.weight
    return {
        "encode": (encoder, (torch.randn(2, FEATURES),)),
        "decode": (decoder, (torch.randn(2, LATENT),)),
    }
