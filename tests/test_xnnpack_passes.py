"""XNNPACK's preprocess without the passes that would change nothing (lowering/xnnpack_passes.py)
yields stock's bytes, and every pass it skips would indeed have given its graph back."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lowerd.lowering import edge_speedups, xnnpack_passes
from lowerd.lowering.xnnpack_passes import XnnpackPassSkips

from helpers import PROJECTS
from known_stock import files_digest, known_or_live, program_digest
from stock import call_entry, forget_project_modules, known_stock_digest


class _ResidualCnn(nn.Module):
    """What a fully delegated CNN holds: conv + batch norm + ReLU, max pooling, a residual add
    and a linear head. One XNNPACK partition."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.MaxPool2d(2)
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.average = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stem(x))
        x = torch.relu(self.block(x) + x)
        return self.head(torch.flatten(self.average(x), 1))


class _ManyOps(nn.Module):
    """Ops that trigger passes the CNN leaves alone: a long concatenation, hardtanh after a linear,
    a 1-d convolution, and bilinear upsampling and PReLU (which XNNPACK keeps whole, so their
    passes have nothing to do). PReLU right after the 1-d convolution would fail in stock
    XNNPACK's ChannelsLastTaggedReshapePass."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(4, 4, 3, padding=1)
        self.conv2d = nn.Conv2d(4, 4, 1)
        self.prelu = nn.PReLU(4)
        self.fc = nn.Linear(16, 16)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        joined = torch.cat([x, x + 1, x * 2, x - 1, x * 3, x + 2], dim=1)
        fc = nn.functional.hardtanh(self.fc(joined[:, :16]))
        line = torch.relu(self.conv1d(y))
        image = nn.functional.interpolate(z, scale_factor=2, mode="bilinear")
        image = self.prelu(self.conv2d(image))
        return fc, line, image


def _cnn() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    model = _ResidualCnn().eval()
    for norm in (model.stem[1], model.block[1]):  # non-trivial statistics, so folding shows
        norm.running_mean.uniform_(-0.5, 0.5)
        norm.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(1, 3, 16, 16),)


def _edited_cnn(edit: str) -> Callable[[], tuple[nn.Module, tuple]]:
    """The CNN after a one-line edit, as a user makes them: an op added at the start, in the middle
    or at the end of its single partition, or one layer's weights scaled."""

    def make() -> tuple[nn.Module, tuple]:
        model, args = _cnn()
        if edit == "weight":
            with torch.no_grad():
                model.block[0].weight.mul_(1.25)
            return model, args
        where = {"start": model.stem[0], "middle": model.pool, "end": model.head}[edit]
        where.register_forward_hook(lambda _module, _args, out: torch.tanh(out))
        return model, args

    return make


def _many_ops() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return _ManyOps().eval(), (torch.randn(2, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 4, 4))


def _quantized(tmp_path: Path) -> tuple[nn.Module, tuple]:
    root = tmp_path / "quantized"
    if not root.exists():
        shutil.copytree(PROJECTS / "quantized", root, ignore=shutil.ignore_patterns("build"))
    try:
        return call_entry(root, "models/qnet.py:make")
    finally:
        forget_project_modules(root)


def _lower(make: Callable[[], tuple[nn.Module, tuple]]) -> str:
    """The sha256 of a lowering of make()'s model to XNNPACK (as what is installed makes it)."""
    model, args = make()
    return _lowered(torch.export.export(model, args))


def _lowered(program: Any) -> str:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return hashlib.sha256(bytes(edge.to_executorch().buffer)).hexdigest()


# name -> the stock digest, for the module's own model factories (their models are seeded: the
# same make always gives the same model).
_STOCK: dict[str, str] = {}


def _stock(name: str, make: Callable[[], tuple[nn.Module, tuple]]) -> str:
    """The stock digest of make()'s model, with nothing of lowerd's installed: once per session,
    and from tests/stock_digests.json for the versions and program it was made with
    (tests/known_stock.py), lowered live otherwise."""
    if name not in _STOCK:
        model, args = make()
        program = torch.export.export(model, args)
        made_of = program_digest(program) + files_digest(Path(__file__))  # _lowered is here
        _STOCK[name] = known_or_live(f"xnnpack-passes-{name}", made_of, lambda: _lowered(program))
    return _STOCK[name]


def _skipped_by(skips: XnnpackPassSkips) -> set[str]:
    return {run.name for run in skips.runs if run.skipped}


CNN_SKIPS = {
    "ConvertToUpsampleBilinear2d",
    "PropagateCustomMetaPass",
    "ConvertToSDPAPass",
    "ConstPropPass",
    "DecomposeBatchNorm",  # FuseBatchNormPass folded every batch norm into its convolution
    "DecomposeConcatenate",
    "RemoveGetItemPass",
    "Conv1dUnsqueezePass",
    "PReLUReshapePass",
}


def test_a_cnn_skips_what_it_does_not_hold_and_equals_stock() -> None:
    skips = XnnpackPassSkips()
    with skips.installed():
        fast = _lower(_cnn)
    assert _skipped_by(skips) == CNN_SKIPS
    # The passes with work to do ran, and so did the first retrace (nothing is skipped before one).
    ran = [run.name for run in skips.runs if not run.skipped]
    assert ran[:2] == ["XNNPACKRemoveCloneOpsTransform", "DimOrderOpsRevertPass"]
    assert {"FuseBatchNormPass", "FuseActivationPass", "ChannelsLastTaggedReshapePass"} <= set(ran)
    assert fast == _stock("cnn", _cnn)


@pytest.mark.parametrize("edit", ["start", "middle", "end", "weight"])
def test_an_edited_cnn_equals_stock(edit: str) -> None:
    skips = XnnpackPassSkips()
    with skips.installed():
        fast = _lower(_edited_cnn(edit))
    assert skips.skipped >= len(CNN_SKIPS) - 1  # a tanh may share a partition with what it follows
    assert fast == _stock(f"cnn-{edit}", _edited_cnn(edit))


def test_a_model_that_triggers_the_passes_runs_them_and_equals_stock() -> None:
    skips = XnnpackPassSkips()
    with skips.installed():
        fast = _lower(_many_ops)
    ran = {run.name for run in skips.runs if not run.skipped}
    assert {
        "ConvertToLinearPass",
        "FuseActivationPass",
        "DecomposeConcatenate",
        "Conv1dUnsqueezePass",
    } <= ran, skips.runs
    assert fast == _stock("many_ops", _many_ops)


def test_a_quantized_model_equals_stock(tmp_path: Path) -> None:
    skips = XnnpackPassSkips()
    with skips.installed():
        fast = _lower(lambda: _quantized(tmp_path))
    assert "PropagateCustomMetaPass" not in _skipped_by(skips)  # its Q/DQ nodes
    assert skips.skipped > 0
    # _lower's stock lowering, as tests/stock.py does it (once per session for this project).
    root = tmp_path / "quantized"
    assert fast == known_stock_digest("qnet", root, "models/qnet.py:make", ["xnnpack"])


@pytest.mark.parametrize("make", [_cnn, _many_ops], ids=["cnn", "many_ops"])
def test_every_pass_the_rule_would_skip_gives_its_graph_back(
    monkeypatch: pytest.MonkeyPatch, make: Callable[[], tuple[nn.Module, tuple]]
) -> None:
    """Run the pipeline in full, and wherever the rule would skip a pass, compare the graph the
    pass returns with the one it got: ops, arguments, order and every node's metadata but the
    fields a retrace renews (from_node's chain, the node's own name)."""
    compared: list[str] = []
    skips = XnnpackPassSkips()

    def comparing(pass_manager: Any, triggers: dict, record: Any) -> Any:
        from executorch.backends.xnnpack._passes import XNNPACKPass
        from executorch.exir.program._program import _transform

        program, retraced = pass_manager.exported_program, False
        for pass_class in pass_manager.passes:
            name = pass_class.__name__
            trigger = triggers.get(name)
            skippable = (
                retraced and trigger is not None and not trigger(program, program.graph_module)
            )
            before = _summary(program) if skippable else None
            instance = pass_class(program) if issubclass(pass_class, XNNPACKPass) else pass_class()
            result = _transform(program, instance)
            if skippable:
                assert _summary(result) == before, name
                compared.append(name)
            retraced = name in xnnpack_passes._RETRACING or (retraced and result is program)
            program = result
        return program

    monkeypatch.setattr(xnnpack_passes, "_transform_skipping", comparing)
    with skips.installed():
        _lower(make)
    assert compared, "the rule skips nothing here: the test compares nothing"


def _summary(program: Any) -> list[tuple]:
    """What XNNPACK's serialization can read of a graph, nodes referred to by position."""
    nodes = list(program.graph.nodes)
    index = {node: position for position, node in enumerate(nodes)}

    def plain(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return ("node", index[value])
        if isinstance(value, (list, tuple)):
            return tuple(plain(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, plain(v)) for k, v in value.items())
        if isinstance(value, torch.Tensor):
            return ("tensor", value.dtype, tuple(value.shape), tuple(value.stride()))
        return value

    signature = program.graph_signature
    parameters = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    weights = {
        index[node]: hashlib.sha256(
            program.state_dict[parameters[node.name]].detach().contiguous().numpy().tobytes()
        ).hexdigest()
        for node in nodes
        if node.op == "placeholder" and node.name in parameters
    }
    return [
        (
            node.op,
            str(node.target) if node.op != "placeholder" else None,
            plain(node.args),
            plain(node.kwargs),
            tuple(
                (key, plain(value))
                for key, value in sorted(node.meta.items())
                if key not in ("from_node", "stack_trace", "tensor_meta")
            ),
            weights.get(index[node]),
        )
        for node in nodes
    ]


def test_a_pipeline_other_than_the_default_runs_whole() -> None:
    """XNNPACK's dynamically quantized linear partitions ask for ConvertToLinearPass alone: no
    pipeline the triggers were read from, so nothing is skipped."""
    from executorch.backends.xnnpack._passes import XNNPACKPassManager
    from executorch.backends.xnnpack._passes.convert_to_linear import ConvertToLinearPass

    model, args = _cnn()
    program = torch.export.export(model, args)
    skips = XnnpackPassSkips()
    with skips.installed():
        XNNPACKPassManager(program, passes=[ConvertToLinearPass]).transform()
    assert skips.runs == []


def test_other_versions_run_every_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(edge_speedups.VALIDATED_VERSIONS, "executorch", "0.0.0")
    skips = XnnpackPassSkips()
    with skips.installed():
        fast = _lower(_cnn)
    assert skips.runs == []
    assert fast == _stock("cnn", _cnn)


def test_the_pattern_graphs_targets_are_kept_in_the_store(tmp_path: Path) -> None:
    """The SDPA patterns' targets, built once, come back from the store without building the
    patterns again (the next process's first preprocess)."""
    from lowerd.cache.store import BlobStore

    store = BlobStore(tmp_path / "cache", max_bytes=None)
    built = xnnpack_passes._pattern_targets("sdpa", xnnpack_passes._sdpa_patterns, store)
    assert built and all("aten.bmm.default" in targets for targets in built)

    def never() -> list[Any]:
        raise AssertionError("the patterns were built again")

    assert xnnpack_passes._pattern_targets("sdpa", never, store) == built
