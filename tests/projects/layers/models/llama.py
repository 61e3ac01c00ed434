"""transformers' Llama from a LlamaConfig (4 layers, hidden size 32, random weights), wrapped to
return logits, its layers edited three ways as a user edits one: the first and the last layer's
MLP activation a GELU, a middle layer's an op XNNPACK refuses (cumsum: its partitions split), and
the last layer's down_proj weights scaled (layer 0's structure, other weights)."""

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM


class Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids).logits


class Refused(nn.Module):
    def forward(self, x):
        return torch.cumsum(nn.functional.silu(x), dim=-1)


def make():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=1,
        num_key_value_heads=1,
        max_position_embeddings=64,
        use_cache=False,
    )
    model = LlamaForCausalLM(config).eval()
    layers = model.model.layers
    layers[0].mlp.act_fn = nn.GELU()
    layers[2].mlp.act_fn = Refused()
    layers[3].mlp.act_fn = nn.GELU()
    with torch.no_grad():
        layers[3].mlp.down_proj.weight.mul_(1.25)
    return Logits(model).eval(), (torch.randint(0, 128, (1, 8)),)
