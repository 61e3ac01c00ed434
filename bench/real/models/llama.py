"""A small Llama-style causal LM from transformers' LlamaConfig, random weights (nothing
downloaded), exported without a KV cache: token ids in, logits out."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from models.common import SMALL, Logits


def make():
    torch.manual_seed(0)
    vocab, hidden, layers, tokens = (256, 32, 2, 8) if SMALL else (32000, 128, 4, 64)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,  # Llama's MLP ratio, about 8/3
        num_hidden_layers=layers,
        num_attention_heads=hidden // 32,  # heads of 32
        num_key_value_heads=max(hidden // 64, 1),  # grouped-query attention
        max_position_embeddings=512,
        use_cache=False,  # exported without a KV cache
    )
    model = LlamaForCausalLM(config).eval()
    model = Logits(model).eval()
    return model, (torch.randint(0, vocab, (1, tokens)),)
