"""transformers' Llama from a LlamaConfig (2 layers, hidden size 32, random weights: nothing
downloaded), wrapped as a new user would: torch.export wants tensors, not a ModelOutput."""

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM


class Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits  # LINE-MARK: llama.call


def make():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=88,
        num_hidden_layers=2,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=64,
        use_cache=False,
    )
    model = Logits(LlamaForCausalLM(config).eval()).eval()
    return model, (torch.randint(0, 128, (1, 8)),)
