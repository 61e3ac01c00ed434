"""The module tree's fingerprint (lowering/module_tree.py) and the subtrees an edit changed,
on tiny modules built twice as a build would load them: no lowering, no file."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lowerd.lowering.edited_region import captured_calls
from lowerd.lowering.module_tree import changed_roots, module_digests
from lowerd.project.method import Method
from lowerd.project.source_map import UserFiles


class Block(nn.Module):
    def __init__(self, width: int = 4, act: nn.Module | None = None):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = act if act is not None else nn.ReLU()
        self.scale = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x)) * self.scale


class Model(nn.Module):
    def __init__(self, *blocks: Block):
        super().__init__()
        self.blocks = nn.ModuleList(blocks or [Block(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


class Choosing(Block):
    """Sets in its code and attributes: their order is the process's."""

    kinds = frozenset({"relu", "gelu", "silu", "tanh", "mish", "elu", "selu", "celu"})

    def __init__(self) -> None:
        super().__init__()
        self.names = set(self.kinds)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chosen = "relu" in {"relu", "tanh", "gelu", "silu", "mish", "elu", "selu", "celu"}
        return super().forward(x) if chosen else x


def roots(before: nn.Module, after: nn.Module) -> list[str]:
    return changed_roots(module_digests(before), module_digests(after))


def test_a_model_built_again_is_unchanged_whatever_its_weights() -> None:
    torch.manual_seed(0)
    first = Model()
    torch.manual_seed(1)
    assert roots(first, Model()) == []


def test_a_swapped_submodule_is_the_region_not_its_parents() -> None:
    assert roots(Model(), Model(Block(), Block(act=nn.GELU()))) == ["blocks.1.act"]


def test_an_attribute_or_a_shape_changes_its_module() -> None:
    scaled = Model()
    scaled.blocks[0].scale = 2.0
    assert roots(Model(), scaled) == ["blocks.0"]
    assert roots(Model(), Model(Block(), Block(width=4), Block())) == ["blocks"]
    wider = Model(Block(), Block())
    wider.blocks[1].fc = nn.Linear(4, 4, bias=False)
    assert roots(Model(), wider) == ["blocks.1.fc"]


def test_a_changed_class_changes_every_module_of_it() -> None:
    class Doubled(Block):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    assert roots(Model(), Model(Block(), Doubled())) == ["blocks.1"]
    assert roots(Model(Block()), Model(Block(), Block())) == ["blocks"]


def test_the_root_changed_is_the_whole_tree() -> None:
    assert roots(Model(), Block()) == [""]


class Rotating(nn.Module):
    """Assigns a new buffer in forward, as a rotary embedding that recomputes its frequencies
    does: the fake forward must leave the real one in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("freq", torch.ones(4))
        self.inner = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.freq = self.freq * 2
        return self.inner(x) * self.freq


def test_the_changed_modules_inputs_are_captured_and_the_model_left_as_it_was(
    tmp_path: Path,
) -> None:
    model = Rotating()
    freq, weight = model.freq, model.inner.fc.weight
    version = weight._version
    method = Method(model, (torch.randn(3, 4),))
    calls = captured_calls(method, ["inner.fc", "inner.act"], UserFiles(tmp_path))
    assert calls is not None
    [x] = calls["inner.fc"].args
    assert type(x) is torch.Tensor and x.shape == (3, 4) and x.dtype == torch.float32
    assert model.freq is freq and torch.equal(freq, torch.ones(4))
    assert model.inner.fc.weight is weight and weight._version == version


def test_a_module_never_called_or_called_with_other_values_is_no_region(tmp_path: Path) -> None:
    class Unused(Model):
        def __init__(self) -> None:
            super().__init__()
            self.spare = nn.Linear(4, 4)

    files = UserFiles(tmp_path)
    assert captured_calls(Method(Unused(), (torch.randn(1, 4),)), ["spare"], files) is None

    class Carrier(nn.Module):
        def forward(self, x: torch.Tensor, state: object) -> torch.Tensor:
            return x

    class Passing(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.carrier = Carrier()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.carrier(x, state=object())  # a cache object, as transformers passes

    assert captured_calls(Method(Passing(), (torch.randn(1, 4),)), ["carrier"], files) is None


def test_the_digests_are_the_same_in_another_process() -> None:
    """A build record's digests are compared by the next build, in another worker: nothing of
    them may depend on the process (str hashes, the order of a set, an address)."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import json, sys; sys.path[:0] = sys.argv[1:]\n"
        "from test_module_tree import Model, Block, Choosing, module_digests\n"
        "print(json.dumps(module_digests(Model(Block(), Choosing()))))\n"
    )
    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONHASHSEED": "7"}
    done = subprocess.run(
        [sys.executable, "-c", script, here], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == module_digests(Model(Block(), Choosing()))
