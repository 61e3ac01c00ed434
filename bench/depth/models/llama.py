"""transformers' LlamaForCausalLM from a config, random weights (seeded; nothing downloaded), in
one of the flows users ship (FLOW):

    plain         exported without a KV cache: token ids in, logits out
    static-cache  transformers' static-cache export wrapper, its default SDPA, a dynamic sequence
    custom-sdpa   the same with ExecuTorch's custom SDPA and KV cache (llama::custom_sdpa,
                  llama::update_cache), as optimum-executorch swaps them in
    optimum       custom-sdpa as optimum-executorch's xnnpack recipe exports it: the target's
                  config (bench/bench_depth.py writes it) adds 8da4w, the recipe's passes and
                  settings, the constant methods

The cache flows are examples/models/llm.py's (the bench copies it beside this file).
bench/bench_depth.py rewrites the constants below in its copy; the edit scenarios insert lines
above the ANCHOR line of make(), where `model` is the LlamaForCausalLM."""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

FLOW = "plain"
LAYERS = 4
HIDDEN = 512
INTERMEDIATE = 1376
HEADS = 8
KV_HEADS = 4
VOCAB = 32000
TIED = False  # the head shares the embedding's weight (Llama-3.2-1B)
TOKENS = 64  # plain: the input's length (the cache flows export a dynamic one)


class Logits(nn.Module):
    """The logits alone: torch.export wants tensors out, a transformers model returns a
    ModelOutput."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs).logits


def causal_lm() -> LlamaForCausalLM:
    sizes = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        tie_word_embeddings=TIED,
    )
    if FLOW == "plain":
        torch.manual_seed(0)
        config = LlamaConfig(**sizes, max_position_embeddings=max(TOKENS, 128), use_cache=False)
        return LlamaForCausalLM(config)
    from models.llm import MAX_SEQ_LEN
    from models.llm import causal_lm as cached_lm

    config = LlamaConfig(
        **sizes, max_position_embeddings=MAX_SEQ_LEN, bos_token_id=1, eos_token_id=2
    )
    return cached_lm(config, "sdpa" if FLOW == "static-cache" else "custom_sdpa")


def make():
    model = causal_lm()
    model = model.eval()  # ANCHOR: the edits go above this line
    if FLOW == "plain":
        return Logits(model).eval(), (torch.randint(0, VOCAB, (1, TOKENS)),)
    from models.llm import exportable

    return exportable(model, custom=FLOW != "static-cache")
