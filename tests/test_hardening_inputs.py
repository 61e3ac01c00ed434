"""Issue 32 §10 and §13: what a pyproject.toml names is untrusted input.

§13: every key that names user code ("module:function": entry, transform_passes, partitioners,
export.module_passes, quantize's and a recipe's calibration, verify_inputs) goes by one rule:
a name without Python source (a builtin or C function) is refused at its line before anything
calls it. `gc:disable` stands for one: calling it would leave the collector off.

No lowering: each case imports (or refuses) the function as a build would, in this process.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowerd.lowering.entry import load_entry
from lowerd.lowering.quantize import calibration_samples
from lowerd.lowering.stages import BuildContext
from lowerd.lowering.user_lowering import (
    load_module_passes,
    load_partitioners,
    load_transform_passes,
)
from lowerd.project.config import load_config
from lowerd.project.errors import EntryError

from helpers import write_pyproject

BUILTIN = "gc:disable"  # no Python source; a call is seen (the collector stays off)
MODEL = "import torch\n\ndef make():\n    return torch.nn.Linear(2, 2), (torch.zeros(1, 2),)\n"


def _calibration(ctx: BuildContext) -> object:
    quantize = ctx.target.quantize
    assert quantize is not None
    return calibration_samples(ctx.config, ctx.target, quantize.calibration, ["forward"])


def _recipe_calibration(ctx: BuildContext) -> object:
    recipe = ctx.target.recipe
    assert recipe is not None
    return calibration_samples(ctx.config, ctx.target, recipe.calibration, ["forward"])


def _verify_inputs(ctx: BuildContext) -> object:
    inputs = ctx.target.verify_inputs
    return calibration_samples(ctx.config, ctx.target, inputs, ["forward"], "verify_inputs")


# key as written in the target's table -> how the build reads what it names
READERS: dict[str, tuple[str, Callable[[BuildContext], Any]]] = {
    "entry": (f'entry = "{BUILTIN}"', lambda ctx: load_entry(ctx.config, ctx.target)),
    "transform_passes": (f'transform_passes = "{BUILTIN}"', load_transform_passes),
    "partitioners": (f'partitioners = "{BUILTIN}"', load_partitioners),
    "module_passes": (f'export.module_passes = "{BUILTIN}"', load_module_passes),
    "calibration": (
        f'quantize = {{ scheme = "xnnpack-int8", calibration = "{BUILTIN}" }}',
        _calibration,
    ),
    "recipe calibration": (
        f'recipe = {{ name = "xnnpack_pt2e_int8_static_per_tensor", calibration = "{BUILTIN}" }}',
        _recipe_calibration,
    ),
    "verify_inputs": (f'verify_inputs = "{BUILTIN}"\nverify = true', _verify_inputs),
}


@pytest.fixture
def collector_on() -> Iterator[None]:
    assert gc.isenabled()
    yield
    gc.enable()  # whatever a failing case did


@pytest.mark.parametrize("key", list(READERS))
def test_a_builtin_named_as_user_code_is_refused_at_its_line_uncalled(
    key: str, tmp_path: Path, collector_on: None
) -> None:
    written, read = READERS[key]
    entry = "" if key == "entry" else 'entry = "m.py:make"\n'
    path = write_pyproject(tmp_path, f"[tool.lowerd.targets.t]\n{entry}{written}\n")
    (tmp_path / "m.py").write_text(MODEL)
    config = load_config(path)
    ctx = BuildContext.start(config, config.targets["t"], None, lambda *_: None, None)
    with pytest.raises(EntryError) as refused:
        read(ctx)
    assert gc.isenabled(), f"{key} {BUILTIN} was called"
    error = refused.value
    line = 2 if key == "entry" else 3
    assert (error.location.file, error.location.line) == (str(path), line), error
    role = key.removeprefix("recipe ")
    assert error.message == (
        f"{role} {BUILTIN} is a builtin_function_or_method without Python source: {role} names "
        "a function defined in a .py file, like 'models/net.py:make'"
    )
