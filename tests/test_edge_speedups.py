"""Edge generation with lowerd's shortcuts (lowering/edge_speedups.py) yields stock's bytes.

Stock here is tests/stock.py: a plain ExecuTorch run with nothing of lowerd's installed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lowerd.cache.store import BlobStore
from lowerd.lowering import edge_speedups
from lowerd.lowering.build import build_target
from lowerd.lowering.edge_speedups import EdgeSpeedups, why_replay
from lowerd.project.config import load_config
from lowerd.project.result import TargetResult

from helpers import PROJECTS
from stock import call_entry, forget_project_modules, importable_copy, sha256, stock_pte

EXAMPLES = PROJECTS.parents[1] / "examples"


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "cache")


@pytest.fixture
def examples(tmp_path: Path) -> Iterator[Path]:
    """A private copy of examples/: its build folder and modules are the test's."""
    with importable_copy(EXAMPLES, tmp_path / "examples") as root:
        yield root


@pytest.fixture(scope="module")
def examples_lowered(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[str], tuple[Path, TargetResult, EdgeSpeedups]]]:
    """An examples/ target built by lowerd, on an empty cache, the first time a test asks for it:
    the project it was built in, the result, and the EdgeSpeedups the build installed."""
    built: dict[str, tuple[Path, TargetResult, EdgeSpeedups]] = {}
    folder = tmp_path_factory.mktemp("examples-lowered")
    with importable_copy(EXAMPLES, folder / "examples") as root:

        def lowered(name: str) -> tuple[Path, TargetResult, EdgeSpeedups]:
            if name not in built:
                seen: list[EdgeSpeedups] = []
                original = EdgeSpeedups.installed

                def spied(self: EdgeSpeedups) -> Any:
                    seen.append(self)
                    return original(self)

                with pytest.MonkeyPatch.context() as patch:
                    patch.setattr(EdgeSpeedups, "installed", spied)
                    result = lowerd_build(root, name, BlobStore(folder / "cache" / name))
                [speedups] = seen
                built[name] = (root, result, speedups)
            return built[name]

        yield lowered


def lowerd_build(root: Path, name: str, store: BlobStore) -> TargetResult:
    config = load_config(root / "pyproject.toml")
    forget_project_modules(root)
    result = build_target(config, config.targets[name], store, reuse=False)
    assert result.status == "ok", result.error
    assert sha256(Path(result.output).read_bytes()) == result.sha256
    return result


def stock_digest(root: Path, name: str) -> str:
    target = load_config(root / "pyproject.toml").targets[name]
    return sha256(stock_pte(root, target.entry.value, list(target.backends)))


@pytest.mark.parametrize(
    ("name", "skipped"),
    [
        # Linear and ReLU are all that is left after functionalization: both replays of each
        # method are redundant.
        ("tiny_linear", 2),
        ("refused", 2),
        ("two_methods", 4),
        ("dynamic", 2),
    ],
)
def test_basic_equals_stock_with_replays_skipped(
    basic_cold: dict[str, Any], name: str, skipped: int
) -> None:
    """The session's cold build of each basic/ target (conftest.py basic_cold, which
    tests/test_fidelity.py reads too), made with the same spy as the `installed` fixture's."""
    built = basic_cold[name]
    result = built.result
    assert result.status == "ok", result.error
    assert sha256(Path(result.output).read_bytes()) == result.sha256
    [speedups] = built.speedups
    assert speedups.skipped == skipped
    assert speedups.replayed == 3 * len(result.methods) - skipped
    assert result.sha256 == stock_digest(built.root, name)


@pytest.mark.parametrize(
    ("name", "skipped"),
    [
        # Conv2d, softmax are in the second table: only the third replay is redundant.
        ("cnn", 1),
        ("transformer", 1),
        ("encoder_decoder", 4),
        ("dynamic_mlp", 2),
    ],
)
def test_lowerd_equals_stock_with_replays_skipped(
    examples_lowered: Callable[[str], tuple[Path, TargetResult, EdgeSpeedups]],
    name: str,
    skipped: int,
) -> None:
    root, result, speedups = examples_lowered(name)
    assert speedups.skipped == skipped
    assert speedups.replayed == 3 * len(result.methods) - skipped
    assert result.sha256 == stock_digest(root, name)


def test_a_replay_with_work_to_do_runs(
    examples_lowered: Callable[[str], tuple[Path, TargetResult, EdgeSpeedups]],
) -> None:
    """The CNN's aten.conv2d is in the second table (XNNPACK keeps convolution, not conv2d): that
    replay decomposes, so it runs; the third finds nothing left and is skipped. (The build of
    test_lowerd_equals_stock_with_replays_skipped[cnn].)"""
    root, result, speedups = examples_lowered("cnn")
    assert [(r.skipped, r.why) for r in speedups.replays] == [
        (False, "an empty table: the replay functionalizes"),
        (False, "aten.conv2d.default is in the table"),
        (True, "no op of the table in the graph"),
    ]
    assert result.sha256 == sha256(stock_pte(root, "models/cnn.py:make", ["xnnpack"]))


def test_metadata_a_replay_drops_forces_it(tmp_path: Path, store: BlobStore) -> None:
    """XNNPACK tags implicit quantize/dequantize nodes in node.meta while choosing what to keep;
    a replay drops the tag, so the replay that would otherwise be skipped runs."""
    root = tmp_path / "quantized"
    shutil.copytree(PROJECTS / "quantized", root, ignore=shutil.ignore_patterns("build"))
    speedups = EdgeSpeedups(None)
    with speedups.installed():
        fast = lower(root, "models/qnet.py:make")
    assert speedups.skipped == 0
    assert "IS_IMPLICIT_Q_DQ_TAG" in speedups.replays[-1].why
    assert sha256(fast) == sha256(stock_pte(root, "models/qnet.py:make", ["xnnpack"]))
    forget_project_modules(root)


class _Counter(nn.Module):
    """A buffer mutated in place: the program outputs a buffer mutation."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1.0)
        return self.fc(x) + self.count


def test_buffer_mutation_equals_stock() -> None:
    def make() -> dict:
        torch.manual_seed(0)
        return {"forward": (_Counter().eval(), (torch.randn(2, 4),))}

    speedups = EdgeSpeedups(None)
    with speedups.installed():
        fast = lower_programs(make())
    assert speedups.skipped == 2
    assert sha256(fast) == sha256(lower_programs(make()))


@pytest.mark.parametrize(
    ("folder", "entry"),
    [
        ("basic", "models/two_methods.py:make"),
        ("basic", "models/dynamic.py:make"),
        ("examples", "models/cnn.py:make"),
    ],
)
def test_a_skippable_replay_gives_its_program_back(
    project: Path, examples: Path, folder: str, entry: str
) -> None:
    """Run every replay the rule would skip and compare its output with its input, node by node:
    names, ops, arguments, all metadata but original_aten and eager_input_vals (which a replay
    rewrites and nothing downstream reads), debug-handle ancestry, signature, ranges, weights."""
    from executorch.exir.program import _program
    from torch.export import ExportedProgram

    raw = ExportedProgram.__dict__["run_decompositions"]
    caller = _program._gen_edge_manager_for_partitioners.__code__
    functional: weakref.WeakSet = weakref.WeakSet()
    compared = []

    def checking(program: Any, table: Any = None, *args: Any, **kwargs: Any) -> Any:
        if sys._getframe(1).f_code is not caller:
            return raw(program, table, *args, **kwargs)
        skippable = why_replay(program, table, args, kwargs, program in functional) is None
        before = _program_summary(program) if skippable else None
        result = raw(program, table, *args, **kwargs)
        functional.add(result)
        if skippable:
            assert _program_summary(result) == before
            compared.append(len(table))
        return result

    ExportedProgram.run_decompositions = checking
    try:
        lower(project if folder == "basic" else examples, entry)
    finally:
        ExportedProgram.run_decompositions = raw
    assert compared


def test_only_edge_generation_replays_are_considered() -> None:
    program = torch.export.export(nn.Sequential(nn.Linear(4, 4)).eval(), (torch.randn(1, 4),))
    speedups = EdgeSpeedups(None)
    with speedups.installed():
        program.run_decompositions({torch.ops.aten.silu.default: lambda x: x})
    assert speedups.replays == []


def test_installed_puts_everything_back() -> None:
    from torch.export import ExportedProgram

    before = ExportedProgram.__dict__["run_decompositions"]
    with EdgeSpeedups(None).installed():
        assert ExportedProgram.__dict__["run_decompositions"] is not before
    assert ExportedProgram.__dict__["run_decompositions"] is before


def test_other_versions_run_every_replay(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edge_speedups, "VALIDATED_VERSIONS", {"torch": "0", "executorch": "0"})
    speedups = EdgeSpeedups(None)
    with speedups.installed():
        lower(project, "models/tiny_linear.py:make")
    assert speedups.replays == []


# -- the op table --------------------------------------------------------------------------


def test_op_table_served_from_store(tmp_path: Path) -> None:
    """In fresh processes: the first parses edge.yaml and stores it, the second reads it; the
    table ExecuTorch holds equals a parse of the file, types included."""
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        import ruamel.yaml
        from lowerd.cache.store import BlobStore
        from lowerd.lowering.edge_speedups import EdgeSpeedups, _same

        real = ruamel.yaml.YAML
        speedups = EdgeSpeedups(BlobStore(Path(sys.argv[1])))
        with speedups.op_table_served():
            from executorch.exir.dialects.edge import _ops
        assert ruamel.yaml.YAML is real and _ops.YAML is real
        assert _same(_ops._edge_dialect_info, _ops._load_edge_dialect_info())
        print(speedups.op_table)
        """
    )
    cache = tmp_path / "cache"

    def run() -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, str(cache)], capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.split()[-1]

    assert run() == "miss"
    assert run() == "hit"


def test_op_table_entries_are_verified(store: BlobStore) -> None:
    speedups = EdgeSpeedups(store)
    text = "- inherits: aten::abs\n  type_alias: {T0: [Float]}\n"
    parsed = [{"inherits": "aten::abs", "type_alias": {"T0": ["Float"]}}]
    parses = []

    def parse() -> Any:
        parses.append(1)
        return parsed

    assert speedups._load_op_table(text, parse) == parsed and speedups.op_table == "miss"
    served = speedups._load_op_table(text, parse)
    assert speedups.op_table == "hit" and len(parses) == 1
    assert edge_speedups._same(served, parsed) and served is not parsed
    # A digest-valid entry that is not plain data is parsed again (and replaced).
    store.put(edge_speedups.op_table_key(text), b"\xc1", edge_speedups.MEMO_KIND)
    assert speedups._load_op_table(text, parse) == parsed and len(parses) == 2
    # Another text is another key.
    assert edge_speedups.op_table_key(text + "\n") != edge_speedups.op_table_key(text)


@pytest.mark.parametrize(
    "value", [[1.5], [(1, 2)], [b"bytes"], {"a": {1.0: "x"}}, [2**70], [object()]]
)
def test_only_exact_plain_data_is_stored(value: Any) -> None:
    assert edge_speedups.encode_plain(value) is None


def test_plain_comparison_sees_types() -> None:
    assert not edge_speedups._same([1], [True])
    assert not edge_speedups._same({"a": 1, "b": 2}, {"b": 2, "a": 1})  # order is data too
    assert edge_speedups._same([{"a": [None, "x", 3]}], [{"a": [None, "x", 3]}])


# -- helpers ---------------------------------------------------------------------------------


def lower(root: Path, entry: str) -> bytes:
    returned = call_entry(root, entry)
    return lower_programs(returned if isinstance(returned, dict) else {"forward": returned})


def lower_programs(methods: dict) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    programs = {
        name: torch.export.export(
            spec[0], spec[1], dynamic_shapes=spec[2] if len(spec) > 2 else None
        )
        for name, spec in methods.items()
    }
    edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch().buffer


# Rewritten by every replay, read by nothing that makes the .pte.
_REWRITTEN = {"original_aten", "eager_input_vals"}


def _program_summary(program: Any) -> dict:
    return {
        "nodes": _graph_summary(program.graph_module),
        "signature": str(program.graph_signature),
        "ranges": repr(program.range_constraints),
        "state": [(k, _value(v)) for k, v in program.state_dict.items()],
        "constants": [(k, _value(v)) for k, v in program.constants.items()],
        "call_graph": repr(program.module_call_graph),
        "graph_meta": sorted(program.graph_module.meta),
    }


def _graph_summary(graph_module: Any) -> list:
    from executorch.exir.debug_handle_utils import get_greatest_ancestor_node_identifier

    nodes = []
    for node in graph_module.graph.nodes:
        meta = {}
        for key, value in node.meta.items():
            if key == "from_node":  # one level deeper after a replay: compare where it leads
                meta[key] = get_greatest_ancestor_node_identifier(node)
            elif key not in _REWRITTEN:
                meta[key] = _value(value)
        args = (_value(node.args), _value(node.kwargs))
        nodes.append((node.name, node.op, str(node.target), args, sorted(meta.items())))
    return nodes


def _value(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(map(str, value.shape)), str(value.dtype), str(value.stride()))
    if isinstance(value, torch.fx.Node):
        return ("node", value.name)
    if isinstance(value, (list, tuple)):
        return tuple(_value(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _value(v)) for k, v in value.items())
    return repr(value)
