"""transformers' LlamaForCausalLM from a config, random weights (seeded; nothing downloaded),
exported without a KV cache: token ids in, logits out. bench/bench_depth.py rewrites the
constants below in its copy; the edit scenarios insert lines above the ANCHOR line of make()."""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

LAYERS = 4
HIDDEN = 512
INTERMEDIATE = 1376
HEADS = 8
KV_HEADS = 4
VOCAB = 32000
TOKENS = 64


class Logits(nn.Module):
    """The logits alone: torch.export wants tensors out, a transformers model returns a
    ModelOutput."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs).logits


def make():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=max(TOKENS, 128),
        use_cache=False,
    )
    model = LlamaForCausalLM(config).eval()
    model = Logits(model).eval()  # ANCHOR: the edits go above this line
    return model, (torch.randint(0, VOCAB, (1, TOKENS)),)
