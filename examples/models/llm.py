"""A tiny Llama (2 layers, hidden 64, vocab 512; seeded random weights, built from a config: no
download) as optimum-executorch 1.1.0's xnnpack recipe exports it with `optimum-cli export
executorch --recipe xnnpack --max_seq_len 64 --use_custom_sdpa --use_custom_kv_cache --qlinear
8da4w`: transformers' static-cache wrapper, attention through ExecuTorch's `llama::custom_sdpa`
op, the cache in ExecuTorch's `CustomKVCache` (`llama::update_cache`), keyword inputs `input_ids`
and `cache_position` with a dynamic sequence length. The 8da4w quantization, the export, lowering
and emission settings and the runner's constant methods are the config's (pyproject.toml).

The attention function and the cache swap are optimum's (optimum/executorch/attentions/
custom_sdpa.py and custom_kv_cache.py, for the layers without a sliding window), written out so
the example needs transformers and ExecuTorch only.
"""

from __future__ import annotations

from typing import Any

import torch
from executorch.examples.models.llama.source_transformation.custom_kv_cache import CustomKVCache
from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401  registers llama::*
from torch.export import Dim
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import StaticCache
from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.modeling_utils import AttentionInterface

from lowerd import Method

MAX_SEQ_LEN = 64  # --max_seq_len 64


def custom_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None = None,
    scaling: float | None = None,
    softcap: float | None = None,
    head_mask: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """optimum's custom_sdpa_with_start_pos_forward: causal attention from the cache's start."""
    query, key, value = (t.transpose(1, 2) for t in (query, key, value))
    dtype = query.dtype
    query, key, value = (t.to(torch.float32) for t in (query, key, value))
    start_pos = position_ids[0][0].item() if module.is_causal else 0
    output = torch.ops.llama.custom_sdpa(
        query,
        key,
        value,
        start_pos=start_pos,
        attn_mask=None,
        drpout_p=0.0,
        is_causal=module.is_causal,
        scale=scaling,
    )
    return output.to(dtype), None


def no_mask(*args: Any, **kwargs: Any) -> None:
    """optimum's sdpa_mask_passthrough: custom_sdpa masks by start position itself."""
    return None


# optimum registers custom_sdpa when it is imported (exporters/executorch/convert.py), and the
# ring-cache name when it exports with its own cache (integrations.py _register_custom_attention).
AttentionInterface.register("custom_sdpa", custom_sdpa)
AttentionMaskInterface.register("custom_sdpa", ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
AttentionInterface.register("custom_sdpa_ring_kv_cache", custom_sdpa)
AttentionMaskInterface.register("custom_sdpa_ring_kv_cache", no_mask)


class ExecuTorchStaticCache(StaticCache):
    """optimum's ETCustomStaticCache: transformers' StaticCache whose layers are ExecuTorch's
    CustomKVCache, [batch, seq, heads, head_dim], updated in place by llama::update_cache."""

    def __init__(self, config: LlamaConfig, max_batch_size: int, max_cache_len: int) -> None:
        super().__init__(
            config=config,
            max_batch_size=max_batch_size,
            max_cache_len=max_cache_len,
            device=None,
            dtype=torch.float32,
        )
        head_dim = config.hidden_size // config.num_attention_heads
        heads = config.num_key_value_heads
        self.early_initialization(
            batch_size=max_batch_size,
            num_heads=heads,
            head_dim=head_dim,
            dtype=torch.float32,
            device=None,
        )
        self.kv_cache = torch.nn.ModuleList(
            CustomKVCache(
                max_batch_size=layer.max_batch_size,
                max_context_length=layer.max_cache_len,
                n_heads=layer.num_heads,
                head_dim=layer.head_dim,
                dtype=torch.float32,
            )
            for layer in self.layers
        )

    def update(
        self,
        key_states: torch.Tensor,
        value_states: torch.Tensor,
        layer_idx: int,
        cache_kwargs: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        cache_position = (cache_kwargs or {}).get("cache_position")
        torch._assert(cache_position is not None, "cache_position must be provided")
        cache = self.kv_cache[layer_idx]
        return cache.update(input_pos=cache_position, k_val=key_states, v_val=value_states)

    def get_seq_length(self, layer_idx: int | None = 0) -> torch.Tensor:
        return self.kv_cache[layer_idx or 0].k_cache[0, :, 0].any(dim=-1).sum()


def tiny_llama(attn_implementation: str = "custom_sdpa") -> LlamaForCausalLM:
    """optimum's load_causal_lm_model on this model: batch 1, fp32, a static cache of 64."""
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_SEQ_LEN,
        bos_token_id=1,
        eos_token_id=2,
    )
    return causal_lm(config, attn_implementation)


def causal_lm(config: LlamaConfig, attn_implementation: str) -> LlamaForCausalLM:
    """optimum's load_causal_lm_model on a config (random weights, seeded: nothing downloaded):
    batch 1, fp32, a static cache of MAX_SEQ_LEN (bench/depth builds deeper ones with it)."""
    config._attn_implementation = attn_implementation
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    model.eval()
    model.generation_config = GenerationConfig(
        use_cache=True,
        cache_implementation="static",
        max_length=MAX_SEQ_LEN,
        cache_config={"batch_size": 1, "max_cache_len": MAX_SEQ_LEN},
        bos_token_id=1,
        eos_token_id=2,
    )
    return model


def exportable(model: LlamaForCausalLM, custom: bool = True) -> Method:
    """optimum's CausalLMExportableModule.export up to torch.export: transformers' static-cache
    wrapper; `custom`: custom_sdpa for attention, ExecuTorch's cache in place of the wrapper's
    cache buffers (--use_custom_sdpa --use_custom_kv_cache)."""
    wrapper = TorchExportableModuleForDecoderOnlyLM(model).model
    if custom:
        wrapper.model.config._attn_implementation = "custom_sdpa_ring_kv_cache"
        wrapper.static_cache = ExecuTorchStaticCache(model.config, 1, MAX_SEQ_LEN)
        for i, layer in enumerate(wrapper.static_cache.kv_cache):
            setattr(wrapper, f"key_cache_{i}", layer.k_cache)
            setattr(wrapper, f"value_cache_{i}", layer.v_cache)
    seq = Dim("seq_length_dim", max=MAX_SEQ_LEN - 1)
    return Method(
        wrapper,
        kwargs={
            "input_ids": torch.zeros((1, 3), dtype=torch.long),
            "cache_position": torch.arange(3, dtype=torch.long),
        },
        dynamic_shapes={"input_ids": {1: seq}, "cache_position": {0: seq}},
    )


def make() -> Method:
    return exportable(tiny_llama())


def make_default() -> Method:
    """optimum's recipe without --use_custom_sdpa --use_custom_kv_cache (bench/bench_optimum.py
    compares all three variants with optimum's own bytes)."""
    return exportable(tiny_llama("sdpa"), custom=False)


def module_passes() -> list[Any]:
    """Run on the exported program's module before optimum's second export."""
    from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes

    return [RemoveRedundantTransposes()]
