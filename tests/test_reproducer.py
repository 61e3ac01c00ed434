"""Issue 15 §3: the stock ExecuTorch script that reproduces a target (the editor's *Copy a stock
ExecuTorch script*, `lowerd reproduce`). The script imports ExecuTorch, never lowerd; run as a
user runs it, it writes the bytes lowerd wrote: .pte, .ptd and all."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.lowering.build import build_target
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.reproducer import stock_script
from lowerd.project.result import TargetResult

from helpers import PROJECTS, lowerd_without_torch
from known_stock import files_digest, known_or_live
from stock import forget_project_modules, importable_copy, run_stock_script

TARGETS = """
[tool.lowerd.targets.options]
entry = "models/lookup.py:make"
external_constants = true
constant_methods = { vocab = 32, names = ["a", "b"] }
[tool.lowerd.targets.options.backend_options.xnnpack]
config_precisions = ["fp32"]
per_op_mode = true
[tool.lowerd.targets.options.edge_compile_config]
_check_ir_validity = false
[tool.lowerd.targets.options.executorch_backend_config]
extract_delegate_segments = false

[tool.lowerd.targets.int8]
entry = "models/tiny_linear.py:make"
quantize = { scheme = "xnnpack-int8" }

[tool.lowerd.targets.int4]
entry = "models/linears.py:make_two"
quantize = { scheme = "8da4w", qparams_algorithm = "hqq_scale_only", filter = "linear_divisible" }

[tool.lowerd.targets.whole_dynamic]
entry = "models/dynamic.py:make"
whole_program = { backend_id = "XnnpackBackend" }

[tool.lowerd.targets.recipe_methods]
entry = "models/two_methods.py:make"
recipe = "xnnpack_pt2e_int8_dynamic_per_channel"
constant_methods = { vocab = 32 }

[tool.lowerd.targets.recipe_calibrated]
entry = "models/tiny_linear.py:make"
recipe = { name = "xnnpack_pt2e_int8_static_per_tensor", calibration = "models/calib.py:samples" }

[tool.lowerd.targets.recipe_dynamic]
entry = "models/dynamic.py:make"
recipe = "xnnpack_fp32"

[tool.lowerd.targets.ecosystem]
entry = "models/decoder.py:make"
export = { strict = true, no_grad = true }
memory_planning = { alloc_graph_input = false, memory_planning_algo = "naive" }
sym_shape_eval = "hint"

[tool.lowerd.targets.transposes]
entry = "models/attention.py:make"
export.module_passes = "passes.py:module_passes"

[tool.lowerd.targets.int8_keywords]
entry = "models/attention.py:make"
quantize = { scheme = "xnnpack-int8" }
"""

CALIBRATION = """\
import torch


def samples():
    generator = torch.Generator().manual_seed(3)
    return [(torch.randn(2, 8, generator=generator),) for _ in range(3)]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectConfig]:
    with importable_copy(PROJECTS / "basic", tmp_path_factory.mktemp("repro") / "basic") as root:
        lookup = PROJECTS / "datafiles" / "models" / "lookup.py"  # a table left on the CPU
        (root / "models" / "lookup.py").write_text(lookup.read_text())
        linears = PROJECTS / "torchaoquant" / "models" / "linears.py"  # two methods, one linear
        (root / "models" / "linears.py").write_text(linears.read_text())
        (root / "models" / "calib.py").write_text(CALIBRATION)
        ecosystem = PROJECTS / "ecosystem"  # keyword inputs, export settings, module passes
        for file in ("models/decoder.py", "models/attention.py", "passes.py"):
            (root / file).write_text((ecosystem / file).read_text())
        pyproject = root / "pyproject.toml"
        pyproject.write_text(pyproject.read_text() + TARGETS)
        yield load_config(pyproject)


def lowerd_build(config: ProjectConfig, name: str) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets[name], None)
    assert result.status == "ok", result.error
    return result


def stock_files(
    project: ProjectConfig, name: str, script: str, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """run_stock_script(script, ...): each file the script writes, by name, and its sha256.
    tests/stock_digests.json's (that mapping as JSON) for these versions, the script's text (its
    project folder, a temporary one, named) and the project's files it reads
    (tests/known_stock.py); the script run otherwise."""
    text = script.replace(repr(str(project.root)), "PROJECT")
    input_digest = hashlib.sha256(f"{text}\0{files_digest(project.root)}".encode()).hexdigest()

    def live() -> str:
        forget_project_modules(project.root)
        return json.dumps(run_stock_script(script, folder, monkeypatch), sort_keys=True)

    return dict(json.loads(known_or_live(f"reproducer-{name}", input_digest, live)))


@pytest.mark.parametrize(
    "name",
    [
        "two_methods",
        "options",
        "int8",
        "int4",
        "whole_dynamic",
        "recipe_methods",
        "recipe_calibrated",
        "recipe_dynamic",
        "ecosystem",
        "transposes",
        "int8_keywords",
    ],
)
def test_the_script_writes_what_lowerd_wrote(
    project: ProjectConfig, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = lowerd_build(project, name)
    script = stock_script(project, project.targets[name])
    imports = [line for line in script.splitlines() if line.startswith(("import ", "from "))]
    assert not [line for line in imports if "lowerd" in line]
    written = stock_files(project, name, script, tmp_path / "out", monkeypatch)
    lowerd_files = {Path(result.output or "").name: result.sha256}
    lowerd_files |= {Path(f.path).name: f.sha256 for f in result.data_files}
    assert written == lowerd_files
    if name == "options":
        assert set(written) == {"options.pte", "options.ptd"}  # the constants went to a .ptd


def test_the_cli_prints_it_without_torch(project: ProjectConfig, tmp_path: Path) -> None:
    run = lowerd_without_torch(project.root, tmp_path / "cache", "stock-script", "options")
    assert run.returncode == 0, run.stderr
    assert run.stdout == stock_script(project, project.targets["options"])
    unknown = lowerd_without_torch(project.root, tmp_path / "cache", "stock-script", "nope")
    assert unknown.returncode == 2 and "unknown target 'nope'" in unknown.stderr
