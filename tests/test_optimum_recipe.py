"""Issue 22: optimum-executorch 1.1.0's xnnpack recipe (default variant) written as a lowerd target
(tests/projects/optimum: keyword inputs, strict export under no_grad with a module pass and a
second export, transform passes, edge and emit configs, memory planning, 12 constant methods)
writes the bytes of a stock script written as optimum's recipe writes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lowerd.lowering.build import build_target
from lowerd.project.config import load_config

from stock import PROJECTS, call_entry, forget_project_modules, importable_copy, sha256

# What /work/research22/stock_optimum.py (a standalone replica of optimum's recipe, verified equal
# to `optimum-cli export executorch --recipe xnnpack` on transformers 5.0.0rc1) writes for this
# model with transformers 4.57.6, whose model code differs from 5.0's in three graph-visible ways
# (research notes: optimum_recipe.md).
STOCK_OPTIMUM_DEFAULT_4_57_6 = "55f94207d934bb77a031f9a8f50b820302216208fa2e4af69f8b4009a2a4ba5b"


def optimum_default(root: Path) -> str:
    """sha256 of the .pte of optimum's recipe, its calls written out (integrations.py export,
    recipes/xnnpack.py _lower_to_executorch) on the fixture's model and example inputs."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import (
        EdgeCompileConfig,
        ExecutorchBackendConfig,
        to_edge_transform_and_lower,
    )
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes

    method = call_entry(root, "models/llama.py:make")
    module, kwargs, shapes = method.module, method.kwargs, method.dynamic_shapes
    with torch.no_grad():
        ep = torch.export.export(module, (), kwargs, dynamic_shapes=shapes, strict=True)
        graph = RemoveRedundantTransposes()(ep.module())[0]
        ep = torch.export.export(graph, (), kwargs, dynamic_shapes=shapes, strict=True)
    edge = to_edge_transform_and_lower(
        {"forward": ep},
        partitioner=[XnnpackPartitioner()],
        compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
        constant_methods=constant_methods(module.model),
        # [RemovePaddingIdxEmbeddingPass()], optimum's pass as the fixture's passes.py has it
        transform_passes=call_entry(root, "passes.py:transform_passes"),
    )
    program = edge.to_executorch(
        ExecutorchBackendConfig(
            extract_delegate_segments=True,
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False),
            do_quant_fusion_and_const_prop=True,
        )
    )
    return sha256(bytes(program.buffer))


def constant_methods(model: Any) -> dict[str, Any]:
    """optimum's utils.py save_config_to_constant_methods, from the model's config."""
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
        "get_max_seq_len": 64,
        "use_kv_cache": model.generation_config.use_cache,
        "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": True,
    }


def test_optimums_default_recipe_as_a_target(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    with importable_copy(PROJECTS / "optimum", tmp_path / "optimum") as root:
        config = load_config(root / "pyproject.toml")
        forget_project_modules(root)
        result = build_target(config, config.targets["model"], None)
        assert result.status == "ok", result.error
        assert result.sha256 == optimum_default(root)
        if transformers.__version__ == "4.57.6":
            assert result.sha256 == STOCK_OPTIMUM_DEFAULT_4_57_6
