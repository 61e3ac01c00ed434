"""The provisional reports of an edit (lowering/edited_region.py) for a target that quantizes
(torchao 8da4w, optimum's filter) and runs module and transform passes, as optimum's recipe does.

With passes the edited region's argument covers (ExecuTorch's RemoveRedundantTransposes,
optimum's RemovePaddingIdxEmbeddingPass), the edited layer is quantized and lowered alone once
the entry is loaded: the first report names its refusal at its line, provisionally, then the
exact one says the same. With a module pass the argument does not cover, the region is not
lowered (a debug line says why): the first report, right after load, is the last build's outside
the edited layer at the lines where the code is now, and the exact one adds the layer's.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import torch

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.lowering.edited_region import _transposes_at_edge
from lowerd.project.config import load_config
from lowerd.project.report_model import MethodReport

from helpers import PROJECTS, logged
from stock import forget_project_modules

QUANTIZE = 'quantize = { scheme = "8da4w", qparams_algorithm = "hqq_scale_only", '
QUANTIZE += 'filter = "linear_divisible" }'
PYPROJECT = f"""[tool.lowerd]
backends = ["xnnpack"]
out_dir = "build"

[tool.lowerd.targets.covered]
entry = "models/blocks.py:make"
{QUANTIZE}
export = {{ strict = true, no_grad = true, module_passes = "passes.py:module_passes" }}
transform_passes = "passes.py:transform_passes"

[tool.lowerd.targets.uncovered]
entry = "models/blocks.py:make"
{QUANTIZE}
export = {{ strict = true, no_grad = true, module_passes = "passes.py:own_passes" }}
transform_passes = "passes.py:transform_passes"
"""
# optimum's passes (tests/projects/optimum/passes.py) and a module pass of the user's own, which
# the edited region's argument does not cover.
PASSES = (
    (PROJECTS / "optimum" / "passes.py").read_text()
    + """

def unchanged(graph):
    return graph


def own_passes():
    return [unchanged]
"""
)
# Three blocks of two divisible linears (quantized 8da4w); the middle one's activation is a
# running sum, which XNNPACK refuses. The embedding's padding_idx is what optimum's pass drops.
MODEL = """import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.act = act
        self.down = nn.Linear(64, 32)

    def forward(self, x):
        return x + self.down(self.act(self.up(x)))


class Running(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1)  # LINE-MARK: running


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 32, padding_idx=0)
        self.layers = nn.ModuleList([Block(nn.ReLU()), Block(Running()), Block(nn.ReLU())])

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return x


def make():
    torch.manual_seed(0)
    net = Net()
    # EDIT
    return net.eval(), (torch.tensor([[1, 2, 3, 0]]),)
"""
# The edit: a block of another class above Running (its line moves by 5), in the last layer.
SCANNING = """class Scanning(Block):
    def forward(self, x):
        return x + self.down(self.up(x) ** 3)  # LINE-MARK: scanning


"""
SWAP = "    net.layers[2] = Scanning(nn.ReLU())\n"
MODEL_FILE = "models/blocks.py"


@dataclass(frozen=True)
class Edited:
    """A target's edit built with a listener: the reports shown, in order, and the debug lines."""

    shown: list[MethodReport]
    debug: list[str]
    lines: dict[str, int]  # LINE-MARK name -> line, in the edited model


def _marks(text: str) -> dict[str, int]:
    marks = {}
    for number, line in enumerate(text.splitlines(), 1):
        if found := re.search(r"LINE-MARK: (\S+)\s*$", line):
            marks[found.group(1)] = number
    return marks


@pytest.fixture(scope="module")
def edits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Edited]]:
    """Both targets built cold, the model edited, each built again with a listener."""
    root = tmp_path_factory.mktemp("quantized_passes") / "project"
    (root / "models").mkdir(parents=True)
    (root / "models" / "__init__.py").write_text("")
    (root / MODEL_FILE).write_text(MODEL)
    (root / "passes.py").write_text(PASSES)
    (root / "pyproject.toml").write_text(PYPROJECT)
    for path in root.rglob("*"):  # saved well before the build: its record is kept
        os.utime(path, (1_000_000_000, 1_000_000_000))
    config = load_config(root / "pyproject.toml")
    store = BlobStore(root.parent / "cache")  # outside the project: not one of its inputs
    saved_path = list(sys.path)
    try:
        with logged("lowerd.lowering.edited_region") as lines:
            for name in ("covered", "uncovered"):
                forget_project_modules(root)
                assert build_target(config, config.targets[name], store).status == "ok"
            text = MODEL.replace("class Running", SCANNING + "class Running")
            text = text.replace("    # EDIT\n", SWAP)
            (root / MODEL_FILE).write_text(text)
            found = {}
            for name in ("covered", "uncovered"):
                forget_project_modules(root)
                lines.clear()
                shown: list[MethodReport] = []
                result = build_target(
                    config, config.targets[name], store, on_partitioned=_appending(shown)
                )
                assert result.status == "ok", result.error
                found[name] = Edited(shown, list(lines), _marks(text))
            yield found
    finally:
        sys.path[:] = saved_path
        forget_project_modules(root)


def _appending(shown: list[MethodReport]) -> Callable[[str, MethodReport], None]:
    def partitioned(method: str, report: MethodReport) -> None:
        shown.append(report)

    return partitioned


def _refused(report: MethodReport) -> set[tuple[str, str | None, int | None, str | None]]:
    return {(op.op, op.file, op.line, op.module_path) for op in report.not_delegated}


def _layer(report: MethodReport, path: str) -> set[tuple[str, str | None, int | None, str | None]]:
    return {op for op in _refused(report) if (op[3] or "").startswith(path)}


def test_an_edited_quantized_layer_is_refused_provisionally_at_its_line_then_exactly(
    edits: dict[str, Edited],
) -> None:
    edited = edits["covered"]
    first, *_, exact = edited.shown
    assert first.provisional and not first.final and not exact.provisional
    assert not [op for op in edited.debug if "no provisional report of the edited region" in op]
    scanning = ("aten.pow.Tensor_Scalar", MODEL_FILE, edited.lines["scanning"], "layers.2")
    running = ("aten.cumsum.default", MODEL_FILE, edited.lines["running"], "layers.1.act")
    # The edited layer lowered alone (quantized, its passes run) refuses what the whole
    # program's partitioners refuse there, at its line; the unedited layer's at its moved line.
    assert _layer(first, "layers.2") == _layer(exact, "layers.2") == {scanning}
    assert _layer(first, "layers.1") == _layer(exact, "layers.1") == {running}
    assert _refused(first) == _refused(exact)


def test_a_module_pass_the_region_does_not_cover_shows_the_rest_at_load(
    edits: dict[str, Edited],
) -> None:
    edited = edits["uncovered"]
    assert any(
        "a module pass the edited region does not cover (unchanged)" in line
        for line in edited.debug
    ), edited.debug
    first, *_, exact = edited.shown
    assert first.provisional and not first.final and not exact.provisional
    running = ("aten.cumsum.default", MODEL_FILE, edited.lines["running"], "layers.1.act")
    # Right after load: the last build's refusals at their lines now (the running sum's moved),
    # nothing of the edited layer (its last build's ops left out; its own not known yet).
    assert running in _refused(first)
    assert _refused(first) == _refused(exact) - _layer(exact, "layers.2")
    assert _layer(exact, "layers.2") == {
        ("aten.pow.Tensor_Scalar", MODEL_FILE, edited.lines["scanning"], "layers.2")
    }
    # Every provisional report before the exact one leaves the edited layer out.
    assert all(not _layer(r, "layers.2") for r in edited.shown if r.provisional)


class _Transposing(torch.nn.Module):
    def __init__(self, first: bool, last: bool) -> None:
        super().__init__()
        self.first, self.last = first, last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, 2) if self.first else x * 2
        x = x.transpose(1, 2).transpose(1, 2) + 1  # a pair inside: removed alike alone
        return x.transpose(1, 2) if self.last else x - 1


@pytest.mark.parametrize(
    ("first", "last", "refused"),
    [(False, False, False), (True, False, True), (False, True, True)],
    ids=["inside", "reads the input", "is the output"],
)
def test_a_transpose_at_the_edited_modules_edge_could_pair_outside(
    first: bool, last: bool, refused: bool
) -> None:
    """RemoveRedundantTransposes pairs a transpose with the one it reads: one at the module's
    edge could pair with one outside it in the whole program, and the module alone would not
    show it."""
    program = torch.export.export(_Transposing(first, last), (torch.zeros(1, 2, 3),), strict=True)
    why = _transposes_at_edge(program)
    assert (why is not None) == refused
    if refused:
        assert why is not None and "a module pass could change the edited module's ops" in why
