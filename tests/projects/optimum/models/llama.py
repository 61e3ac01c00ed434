"""A tiny Llama (2 layers, hidden 64, vocab 512; seeded random weights) as optimum-executorch
1.1.0's xnnpack recipe exports it by default (`optimum-cli export executorch --recipe xnnpack
--max_seq_len 64`): transformers' static-cache wrapper, keyword inputs `input_ids` and
`cache_position` with a dynamic sequence length (optimum's integrations.py
CausalLMExportableModule). The export, lowering and emission settings are the config's."""

import torch
from torch.export import Dim
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

from lowerd import Method

MAX_SEQ_LEN = 64  # --max_seq_len 64


def tiny_llama() -> torch.nn.Module:
    """optimum's load_causal_lm_model on a checkpoint of this model: batch 1, fp32, static cache."""
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=1,
        eos_token_id=2,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    model.generation_config = GenerationConfig(
        use_cache=True,
        cache_implementation="static",
        max_length=MAX_SEQ_LEN,
        cache_config={"batch_size": 1, "max_cache_len": MAX_SEQ_LEN},
        bos_token_id=1,
        eos_token_id=2,
    )
    return model


def make() -> Method:
    wrapper = TorchExportableModuleForDecoderOnlyLM(tiny_llama())
    seq = Dim("seq_length_dim", max=MAX_SEQ_LEN - 1)
    return Method(
        wrapper.model,
        kwargs={
            "input_ids": torch.zeros((1, 3), dtype=torch.long),
            "cache_position": torch.arange(3, dtype=torch.long),
        },
        dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}},
    )
