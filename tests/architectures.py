"""A spread of tiny transformers decoders and encoders (random weights from a config, nothing
downloaded) for checking lowerd's shortcuts against the stock script on more than Llama (which is
here too): learned position embeddings (OPT, GPT-2, BERT), post-norm (OPT with
do_layer_norm_before=False, BERT), parallel attention/MLP with partial rotary (Phi), biased q/k/v
(Qwen2), a scaled embedding and (1 + w) RMSNorm (Gemma). Each is wrapped to return logits (BERT:
its last hidden state) for input_ids of shape (1, 12); every model has two layers and hidden size
32, so one is cheap to export and lower."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

SEQUENCE = 12
VOCAB = 128


class Logits(nn.Module):
    """The model's logits (or, without a head, its last hidden state) for input_ids."""

    def __init__(self, model: nn.Module, field: str = "logits") -> None:
        super().__init__()
        self.model = model
        self.field = field

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(input_ids=input_ids), self.field)  # type: ignore[no-any-return]


# The small shape, under the names Phi's, Qwen2's, Gemma's and BERT's configs take (OPT's and
# GPT-2's take others).
_SMALL = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "max_position_embeddings": 64,
}


def _model(config: str, model: str, head: str = "logits", **fields: Any) -> nn.Module:
    """transformers' `model` built from its `config` class with the small shape and `fields`."""
    import transformers

    made = getattr(transformers, config)(**{**_SMALL, **fields})
    if model == "BertModel":
        return Logits(transformers.BertModel(made, add_pooling_layer=False), head)
    return Logits(getattr(transformers, model)(made), head)


def _opt(**options: Any) -> nn.Module:
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        ffn_dim=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=64,
        word_embed_proj_dim=32,
        use_cache=False,
        pad_token_id=1,
        **options,
    )
    return Logits(OPTForCausalLM(config))


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=2, n_head=2, use_cache=False
    )
    return Logits(GPT2LMHeadModel(config))


ARCHITECTURES: dict[str, Callable[[], nn.Module]] = {
    "llama": lambda: _model(
        "LlamaConfig", "LlamaForCausalLM", num_key_value_heads=1, use_cache=False
    ),
    "opt": _opt,
    "opt-post-norm": lambda: _opt(do_layer_norm_before=False),
    "gpt2": _gpt2,
    "phi": lambda: _model("PhiConfig", "PhiForCausalLM", use_cache=False),
    "qwen2": lambda: _model(
        "Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=1, use_cache=False
    ),
    "gemma": lambda: _model(
        "GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16, use_cache=False
    ),
    "bert": lambda: _model("BertConfig", "BertModel", "last_hidden_state"),
}


def architecture(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The named model in eval mode, seeded, and its example input_ids."""
    torch.manual_seed(0)
    model = ARCHITECTURES[name]().eval()
    return model, (torch.randint(2, VOCAB, (1, SEQUENCE)),)


def exported(name: str, strict: bool = False) -> Any:
    """The named model exported as a user would: torch.export.export(model, inputs); strict,
    under no_grad, as transformers' convert_and_export_with_cache and optimum-executorch do."""
    model, inputs = architecture(name)
    if not strict:
        return torch.export.export(model, inputs)
    with torch.no_grad():
        return torch.export.export(model, inputs, strict=True)


def dynamic_llama() -> Any:
    """A two-layer transformers Llama (no KV cache) exported as the LLM flows users ship export
    it: non-strict, the sequence length a Dim from 1 to max_seq_len - 1 (optimum-executorch's
    range; export raises the 1 to 2, as every such program's range constraints show)."""
    torch.manual_seed(0)
    model = _model("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=1, use_cache=False).eval()
    inputs = (torch.randint(2, VOCAB, (1, SEQUENCE)),)
    sequence = torch.export.Dim("sequence", min=1, max=_SMALL["max_position_embeddings"] - 1)
    return torch.export.export(model, inputs, dynamic_shapes=({1: sequence},), strict=False)
