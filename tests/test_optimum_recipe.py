"""Issue 22: optimum-executorch 1.1.0's xnnpack recipe (default variant) written as a lowerd target
(tests/projects/optimum, on examples/'s tiny Llama: keyword inputs, strict export under no_grad
with a module pass and a second export, transform passes, edge and emit configs, memory planning,
12 constant methods) writes the bytes of a stock script written as optimum's recipe writes it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lowerd.lowering.build import build_target
from lowerd.project.config import load_config

from helpers import EXAMPLES
from stock import PROJECTS, call_entry, forget_project_modules, importable_copy, optimum_pte, sha256
from testkit.stock_lowering import importable

# What /work/research22/stock_optimum.py (a standalone replica of optimum's recipe, verified equal
# to `optimum-cli export executorch --recipe xnnpack` on transformers 5.0.0rc1) writes for this
# model with transformers 4.57.6, whose model code differs from 5.0's in three graph-visible ways
# (research notes: optimum_recipe.md).
STOCK_OPTIMUM_DEFAULT_4_57_6 = "55f94207d934bb77a031f9a8f50b820302216208fa2e4af69f8b4009a2a4ba5b"


def test_optimums_default_recipe_as_a_target(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    with importable_copy(PROJECTS / "optimum", tmp_path / "optimum") as root:
        (root / "models").mkdir()
        shutil.copy(EXAMPLES / "models" / "llm.py", root / "models" / "llm.py")
        config = load_config(root / "pyproject.toml")
        forget_project_modules(root)
        result = build_target(config, config.targets["model"], None)
        assert result.status == "ok", result.error
        with importable(root):
            method = call_entry(root, "models/llm.py:make_default")
            assert result.sha256 == sha256(optimum_pte(method, custom_sdpa=False))
        if transformers.__version__ == "4.57.6":
            assert result.sha256 == STOCK_OPTIMUM_DEFAULT_4_57_6
