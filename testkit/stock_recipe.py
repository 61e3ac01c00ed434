"""The stock script of the flows users ship, written out by hand as stock_lowering.py is: a
method exported as transformers' and optimum-executorch's export code do it (strict, under
no_grad, module passes then a second export), lowered with the settings their lowering passes
(EdgeCompileConfig, transform passes, constant methods, ExecutorchBackendConfig with its
memory planning), and optimum-executorch 1.1.0's torchao quantization and constant methods.

The tests (tests/stock.py optimum_pte) and bench_depth's stock runs (bench/harness.py) lower
with it. Imports only the standard library at the top, as stock_lowering.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Recipe:
    """How a stock script exports and lowers one method; the defaults are ExecuTorch's."""

    strict: bool = False
    no_grad: bool = False
    module_passes: Sequence[Any] = ()  # run on ep.module(), then exported again
    transform_passes: Sequence[Any] | None = None
    compile_config: dict[str, Any] | None = None  # EdgeCompileConfig(**compile_config)
    constant_methods: dict[str, Any] | None = None
    backend_config: dict[str, Any] = field(default_factory=dict)  # ExecutorchBackendConfig
    alloc_graph_input: bool | None = None  # MemoryPlanningPass(alloc_graph_input=...)


def lower_recipe(
    method: Any,
    partitioners: list[Any],
    recipe: Recipe,
    mark: Callable[[str], None] | None = None,
) -> tuple[Any, bytes]:
    """Stock ExecuTorch on a lowerd.Method (module, args, kwargs, dynamic_shapes) as `recipe`
    says: the edge program manager and the .pte's bytes; `mark` is told each stage as it
    starts ("export", "lower", "emit")."""
    import torch
    from executorch.exir import (
        EdgeCompileConfig,
        ExecutorchBackendConfig,
        to_edge_transform_and_lower,
    )
    from executorch.exir.passes import MemoryPlanningPass

    stage = mark or (lambda _stage: None)
    args, kwargs, shapes = tuple(method.args), dict(method.kwargs), method.dynamic_shapes
    stage("export")
    with torch.no_grad() if recipe.no_grad else nullcontext():
        ep = torch.export.export(
            method.module, args, kwargs, dynamic_shapes=shapes, strict=recipe.strict
        )
        if recipe.module_passes:  # optimum's CausalLMExportableModule.export
            graph = ep.module()
            for module_pass in recipe.module_passes:
                graph = module_pass(graph)[0]
            ep = torch.export.export(
                graph, args, kwargs, dynamic_shapes=shapes, strict=recipe.strict
            )
    stage("lower")
    edge = to_edge_transform_and_lower(
        {"forward": ep},
        partitioner=partitioners,
        compile_config=(
            EdgeCompileConfig(**recipe.compile_config) if recipe.compile_config else None
        ),
        constant_methods=recipe.constant_methods,
        transform_passes=recipe.transform_passes,
    )
    stage("emit")
    backend = dict(recipe.backend_config)
    if recipe.alloc_graph_input is not None:
        backend["memory_planning_pass"] = MemoryPlanningPass(
            alloc_graph_input=recipe.alloc_graph_input
        )
    program = edge.to_executorch(ExecutorchBackendConfig(**backend))
    return edge, bytes(program.buffer)


# optimum-executorch 1.1.0's xnnpack recipe (optimum/exporters/executorch) ----------------------


def optimum_recipe(
    module_passes: Sequence[Any], transform_passes: Sequence[Any], constant_methods: dict[str, Any]
) -> Recipe:
    """integrations.py CausalLMExportableModule.export (strict, under no_grad, the module passes
    and a second export) and recipes/xnnpack.py _lower_to_executorch's settings."""
    return Recipe(
        strict=True,
        no_grad=True,
        module_passes=module_passes,
        transform_passes=transform_passes,
        compile_config={"_check_ir_validity": False, "_skip_dim_order": True},
        constant_methods=constant_methods,
        backend_config={"extract_delegate_segments": True, "do_quant_fusion_and_const_prop": True},
        alloc_graph_input=False,
    )


def optimum_quantize_model(model: Any, qlinear: str) -> None:
    """optimum-executorch 1.1.0's quantize_model_ (exporters/executorch/quantization.py) for
    `--qlinear 8da4w` or `8da8w` with its defaults (group size 32: causal_lm.py never forwards
    another; hqq_scale_only), in place, on the eager model."""
    import torch
    from torchao.quantization.granularity import (  # type: ignore[import-untyped]
        PerAxis,
        PerGroup,
    )
    from torchao.quantization.quant_api import (  # type: ignore[import-untyped]
        Int8DynamicActivationIntxWeightConfig,
        quantize_,
    )
    from torchao.utils import unwrap_tensor_subclass  # type: ignore[import-untyped]

    config = {
        "8da4w": Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int4,  # type: ignore[attr-defined]
            weight_granularity=PerGroup(32),
            intx_choose_qparams_algorithm="hqq_scale_only",
        ),
        "8da8w": Int8DynamicActivationIntxWeightConfig(
            weight_dtype=torch.int8,
            weight_granularity=PerAxis(0),
            intx_choose_qparams_algorithm="hqq_scale_only",
        ),
    }[qlinear]

    def per_group_filter(module: Any, fqn: str) -> bool:
        if isinstance(module, torch.nn.Linear):
            return bool(module.weight.shape[1] % 32 == 0)
        return False

    quantize_(model, config, filter_fn=per_group_filter)
    unwrap_tensor_subclass(model)


def optimum_constant_methods(
    model: Any, custom_sdpa: bool, max_seq_len: int = 64
) -> dict[str, Any]:
    """utils.py save_config_to_constant_methods, from the model's config."""
    import torch

    config = model.config
    return {
        "get_dtype": 5 if model.dtype == torch.float16 else 6,
        "get_bos_id": config.bos_token_id,
        "get_eos_id": config.eos_token_id,
        "get_head_dim": config.hidden_size / config.num_attention_heads,
        "get_n_kv_heads": config.num_key_value_heads,
        "get_n_layers": config.num_hidden_layers,
        "get_vocab_size": config.vocab_size,
        "get_max_batch_size": 1,
        "get_max_seq_len": max_seq_len,
        "use_kv_cache": model.generation_config.use_cache,
        "use_sdpa_with_kv_cache": custom_sdpa,
        "enable_dynamic_shape": True,
    }
