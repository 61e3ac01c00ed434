"""Issue 32 §10 and §13: what a pyproject.toml names is untrusted input.

§10: a path with a NUL (which no path holds) is refused at its line, for every key that takes a
path; and every error quotes the user's text with its control characters escaped (a NUL, a
terminal's escape, a carriage return, a bidirectional override), wherever it was made: one
rule in LowerdError and ErrorInfo, not one per message.

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
from lowerd.project.errors import ConfigError, EntryError
from lowerd.project.result import ErrorInfo
from lowerd.project.wire import decode, encode

from helpers import TRACEBACK, assert_config_error, lowerd_without_torch, write_pyproject

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


# §10 ------------------------------------------------------------------------------------------

NUL = "\0"  # TOML writes it as an escape:
ESCAPED = "\\u0000"
# key as written (in [tool.lowerd] or the target's table), with a NUL in its path
NUL_PATHS = {
    "out_dir": ("project", f'out_dir = "build{ESCAPED}"'),
    "cache_dir": ("project", f'cache_dir = "cache{ESCAPED}"'),
    "cache_remote_sign_key": ("project", f'cache_remote_sign_key = "keys/sign{ESCAPED}.pem"'),
    "cache_remote_verify_key": ("project", f'cache_remote_verify_key = "keys/v{ESCAPED}.pub"'),
    "entry": ("target", f'entry = "models/scan{ESCAPED}.py:make"'),
    "module_passes": ("target", f'export.module_passes = "passes{ESCAPED}.py:passes"'),
    "ops": ("target", f'runtime.ops = "ops{ESCAPED}.yaml"'),
}


def _with(where: str, line: str) -> str:
    """A config whose [tool.lowerd] (line 2) or target table (line 4) holds `line`."""
    project, target = (line, "") if where == "project" else ("", line)
    entry = "" if line.startswith("entry") else 'entry = "m.py:make"'
    return f"[tool.lowerd]\n{project}\n[tool.lowerd.targets.t]\n{entry}\n{target}\n"


@pytest.mark.parametrize("key", list(NUL_PATHS))
def test_a_path_with_a_nul_is_refused_at_its_line(key: str, tmp_path: Path) -> None:
    where, line = NUL_PATHS[key]
    number = 2 if where == "project" else 5
    assert_config_error(tmp_path, _with(where, line), number, [f"{key} ", "holds a NUL"])


def test_a_nul_in_the_signing_keys_path_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    """The issue's case: `embedded null byte` from the key's load, a traceback."""
    write_pyproject(tmp_path, _with("project", NUL_PATHS["cache_remote_sign_key"][1]))
    run = lowerd_without_torch(tmp_path, tmp_path / "cache", "build")
    assert run.returncode == 2, run.log
    assert TRACEBACK not in run.stderr and NUL not in run.stderr
    pyproject = tmp_path / "pyproject.toml"
    assert run.stderr.splitlines() == [
        f"lowerd: {pyproject}:2: cache_remote_sign_key 'keys/sign\\x00.pem' holds a NUL "
        "character: no path can"
    ]


CONTROLS = "\x1b[2J\r\u202e\x07"  # clear the terminal, back to the line's start, reverse, bell
SHOWN = "\\x1b[2J\\r\\u202e\\x07"
IN_TOML = "\\u001b[2J\\r\\u202e\\u0007"


def test_an_error_quoting_control_characters_shows_them_escaped(tmp_path: Path) -> None:
    path = write_pyproject(tmp_path, f'[tool.lowerd.targets.t]\nentry = "scan{IN_TOML}.py:f"\n')
    config = load_config(path)
    with pytest.raises(EntryError) as missing:
        load_entry(config, config.targets["t"])
    expected = f"entry file scan{SHOWN}.py does not exist (target 't')"
    assert missing.value.message == expected
    assert str(missing.value) == f"{path}:2: {expected}"
    assert missing.value.info().message == expected


def test_every_error_shows_control_characters_escaped_whoever_made_it() -> None:
    """A config error, a worker's crash, an answer decoded off a pipe: each escaped once."""
    error = ConfigError(f"bad {CONTROLS} value", "pyproject.toml", 3)
    assert error.message == f"bad {SHOWN} value"
    crash = ErrorInfo("worker-crash", f"killed {CONTROLS}")
    assert crash.message == f"killed {SHOWN}"
    raw = {**encode(crash), "message": f"from the pipe {CONTROLS}\nnext line\tkept"}
    assert decode(ErrorInfo, raw).message == f"from the pipe {SHOWN}\nnext line\tkept"
    assert ErrorInfo("x", crash.message).message == crash.message  # escaping twice: the same
