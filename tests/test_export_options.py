"""Issue 22 §1-2: export as the ecosystem calls it (lowerd.Method's keyword inputs; [..export]
strict, no_grad, module_passes) and the emit passes in config ([..memory_planning],
sym_shape_eval): each read at its line, each .pte the stock script's with the same calls (and
not the default's), each keyed in the build's inputs and the program fingerprint."""

from __future__ import annotations

import contextlib
import logging
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project import compile_configs
from lowerd.project.build_state import load_state, why_out_of_date
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import assert_config_error, line_marks, logged
from known_stock import files_digest, known_or_live
from stock import PROJECTS, call_entry, forget_project_modules, importable_copy, sha256

DECODER = "models/decoder.py:make"

# The stock script ------------------------------------------------------------------------------


def stock(
    root: Path,
    entry: str = DECODER,
    *,
    strict: bool = False,
    no_grad: bool = False,
    module_passes: tuple[Callable[[Any], Any], ...] = (),
    **emit: Callable[[], Any],
) -> str:
    """sha256 of what a script written as optimum-executorch writes its export makes: the
    method exported (under no_grad), its module through the passes and exported again, lowered
    to XNNPACK in grad mode, emitted with the passes `emit` makes (memory_planning_pass=...)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    method = call_entry(root, entry)
    if isinstance(method, tuple):
        (module, args, shapes), kwargs = method, {}
    else:
        module, args, kwargs, shapes = (
            method.module,
            method.args,
            method.kwargs,
            method.dynamic_shapes,
        )
    with torch.no_grad() if no_grad else contextlib.nullcontext():
        program = torch.export.export(module, args, kwargs, dynamic_shapes=shapes, strict=strict)
        if module_passes:
            graph = program.module()
            for module_pass in module_passes:
                graph = module_pass(graph)[0]
            program = torch.export.export(graph, args, kwargs, dynamic_shapes=shapes, strict=strict)
    edge = to_edge_transform_and_lower({"forward": program}, partitioner=[XnnpackPartitioner()])
    config = ExecutorchBackendConfig(**{name: make() for name, make in emit.items()})
    return sha256(bytes(edge.to_executorch(config).buffer))


def _remove_redundant_transposes() -> tuple[Callable[[Any], Any], ...]:
    from executorch.extension.llm.export.export_passes import RemoveRedundantTransposes

    return (RemoveRedundantTransposes(),)


def _memory_planning(**arguments: Any) -> Callable[[], Any]:
    def make() -> Any:
        from executorch.exir import memory_planning
        from executorch.exir.passes import MemoryPlanningPass

        if "memory_planning_algo" in arguments:
            algorithm = getattr(memory_planning, arguments.pop("memory_planning_algo"))
            suite = memory_planning.MemoryPlanningAlgorithmSuite(algo_list=[algorithm])
            arguments["memory_planning_algo"] = suite
        return MemoryPlanningPass(**arguments)

    return make


def _hint() -> Any:
    from executorch.exir.passes.sym_shape_eval_pass import HintBasedSymShapeEvalPass

    return HintBasedSymShapeEvalPass()


# The stock calls the targets are compared with, by name: several targets share one.
STOCK_CALLS: dict[str, dict[str, Any]] = {
    "default": {},
    "positional": {"entry": "models/decoder.py:make_positional"},
    "strict": {"strict": True},
    "inputs_unplanned": {"memory_planning_pass": _memory_planning(alloc_graph_input=False)},
    "naive": {
        "memory_planning_pass": _memory_planning(
            memory_planning_algo="naive", alloc_graph_output=False
        )
    },
    "outputs_unplanned": {"memory_planning_pass": _memory_planning(alloc_graph_output=False)},
    "hint": {"sym_shape_eval_pass": _hint},
    "kv_cache_no_grad": {"entry": "models/kv_cache.py:make", "strict": True, "no_grad": True},
    "kv_cache": {"entry": "models/kv_cache.py:make", "strict": True},
    "attention_transposes": {"entry": "models/attention.py:make", "module_passes": "transposes"},
    "attention": {"entry": "models/attention.py:make"},
}

# target -> (the stock call with the target's option, the same call without it)
STOCK: dict[str, tuple[str, str]] = {
    "decoder": ("default", "positional"),
    "positional": ("positional", "default"),
    "strict": ("strict", "default"),
    "inputs_unplanned": ("inputs_unplanned", "default"),
    "naive": ("naive", "outputs_unplanned"),
    "hint": ("hint", "default"),
    "kv_cache": ("kv_cache_no_grad", "kv_cache"),
    "attention": ("attention_transposes", "attention"),
}


def _stock_of(root: Path, call: dict[str, Any]) -> str:
    call = dict(call)
    if call.get("module_passes") == "transposes":
        call["module_passes"] = _remove_redundant_transposes()
    return stock(root, **call)


# Lowering --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProjectConfig]:
    copy = tmp_path_factory.mktemp("ecosystem") / "ecosystem"
    with importable_copy(PROJECTS / "ecosystem", copy) as root:
        yield load_config(root / "pyproject.toml")


def _build(config: ProjectConfig, name: str, store: BlobStore | None = None) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets[name], store)
    assert result.status == "ok", result.error
    return result


EXPORT_LOG = "lowerd.lowering.export_call"


@pytest.fixture(scope="module")
def export_log() -> dict[str, list[str]]:
    """What lowerd.lowering.export_call logged, at DEBUG, during each build `built` made."""
    return {}


@pytest.fixture(scope="module")
def built(
    project: ProjectConfig, export_log: dict[str, list[str]]
) -> Callable[[str], TargetResult]:
    """A target of the module's project built once: the tests that read its result, its build
    state or its export's log share the build."""
    made: dict[str, TargetResult] = {}

    def build(name: str) -> TargetResult:
        if name not in made:
            with logged(EXPORT_LOG) as messages:
                made[name] = _build(project, name)
            export_log[name] = messages
        return made[name]

    return build


@pytest.fixture(scope="module")
def stock_digest(project: ProjectConfig) -> Callable[[str], str]:
    """The digest of a STOCK_CALLS call on the module's project, made once: targets share them.
    tests/stock_digests.json's for these versions, this file and the project's files
    (tests/known_stock.py), lowered live otherwise."""
    made: dict[str, str] = {}

    def digest(call: str) -> str:
        if call not in made:
            made[call] = known_or_live(
                f"export-options-{call}",
                files_digest(Path(__file__), project.root),
                lambda: _stock_of(project.root, STOCK_CALLS[call]),
            )
        return made[call]

    return digest


@pytest.mark.parametrize("name", list(STOCK))
def test_each_option_is_the_stock_scripts(
    built: Callable[[str], TargetResult], stock_digest: Callable[[str], str], name: str
) -> None:
    result = built(name)
    assert result.sha256 == sha256(Path(result.output or "").read_bytes())
    with_option, without = STOCK[name]
    assert result.sha256 == stock_digest(with_option)
    assert result.sha256 != stock_digest(without)  # the option moves bytes


@pytest.mark.parametrize("shortcut", [True, False])
def test_strict_export_writes_guards_without_cse_and_the_bytes_are_stocks(
    project: ProjectConfig,
    built: Callable[[str], TargetResult],
    export_log: dict[str, list[str]],
    stock_digest: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    shortcut: bool,
) -> None:
    """Issue 31 §3: a strict export's shape-guard function, which export drops, is written
    without torch's CSE pass (export_speedups.py); with other versions torch's own function
    runs. Either way the .pte is the stock script's. With the shortcut (these versions), the
    module's first build of the target (`built`, which test_each_option_is_the_stock_scripts
    reads too) is the one read; without it, a build of its own."""
    if shortcut:
        result = built("strict")  # status ok, or _build fails
        messages = export_log["strict"]
    else:
        monkeypatch.setattr("lowerd.lowering.export_speedups.validated_versions", lambda: False)
        caplog.set_level(logging.DEBUG, logger=EXPORT_LOG)
        forget_project_modules(project.root)
        result = build_target(project, project.targets["strict"], None, reuse=False)
        assert result.status == "ok", result.error
        messages = [r.getMessage() for r in caplog.records]
    lines = [message for message in messages if "guard functions" in message]
    assert lines, "a strict export of a dynamic sequence writes a shape-guard function"
    path = (
        r"[1-9]\d* guard functions written without CSE, 0 with"
        if shortcut
        else r": 0 guard.* [1-9]"
    )
    assert all(re.search(path, line) for line in lines), lines
    assert result.sha256 == stock_digest("strict")


def test_keyword_inputs_are_in_the_program_fingerprint(
    project: ProjectConfig, built: Callable[[str], TargetResult]
) -> None:
    """Keyword and positional inputs make the same graph but other programs: other digests."""
    digests = {}
    for name in ("decoder", "positional"):
        built(name)
        state = load_state(project, project.targets[name])
        assert state is not None
        digests[name] = state.method_digests["forward"]
    assert digests["decoder"] != digests["positional"]


def test_options_are_shown_and_keyed(tmp_path: Path) -> None:
    with importable_copy(PROJECTS / "ecosystem", tmp_path / "ecosystem") as root:
        config = load_config(root / "pyproject.toml")
        store = BlobStore(tmp_path / "cache")
        result = _build(config, "kv_cache", store)
        options = {"export": {"strict": True, "no_grad": True}}
        assert result.options == options
        assert decode(TargetResult, encode(result)).options == options
        target = config.targets["kv_cache"]
        assert why_out_of_date(config, target, load_state(config, target)) is None

        pyproject = root / "pyproject.toml"
        pyproject.write_text(
            pyproject.read_text().replace(
                "export = { strict = true, no_grad = true }",
                'export = { strict = true, no_grad = true }\nsym_shape_eval = "constraint"',
            )
        )
        config = load_config(pyproject)
        target = config.targets["kv_cache"]
        assert why_out_of_date(config, target, load_state(config, target)) == (
            "configuration or tool versions changed"
        )
        again = _build(config, "kv_cache", store)
        # ExecuTorch's default pass, named: the same bytes, lowered afresh (its own key).
        assert again.sha256 == result.sha256 and again.reused is None
        assert again.options == {**options, "sym_shape_eval": "constraint"}


def test_passes_changed_rebuild_and_a_bad_pass_is_blamed(tmp_path: Path) -> None:
    with importable_copy(PROJECTS / "ecosystem", tmp_path / "ecosystem") as root:
        config = load_config(root / "pyproject.toml")
        target = config.targets["attention"]
        first = _build(config, "attention")
        state = load_state(config, target)
        assert state is not None
        passes = root / "passes.py"
        assert str(passes.resolve()) in {source.path for source in state.sources}

        passes.write_text(passes.read_text().replace("[RemoveRedundantTransposes()]", "[]"))
        assert why_out_of_date(config, target, load_state(config, target)) == (
            f"{passes.resolve()} changed"
        )
        plain = _build(config, "attention")
        assert plain.sha256 != first.sha256  # no pass: the transposes stay

        passes.write_text(passes.read_text() + "\n\ndef wrong():\n    return [lambda gm: None]\n")
        pyproject = root / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace(":module_passes", ":wrong"))
        config = load_config(pyproject)
        forget_project_modules(root)
        failed = build_target(config, config.targets["attention"], None)
        assert failed.status == "error" and failed.error is not None
        assert "returned a NoneType; a module pass returns a GraphModule" in failed.error.message
        line = pyproject.read_text().splitlines().index('export.module_passes = "passes.py:wrong"')
        assert (failed.error.file, failed.error.line) == ("pyproject.toml", line + 1)


# Entries ---------------------------------------------------------------------------------------


def test_whole_program_with_keyword_inputs_is_refused_at_the_entry(tmp_path: Path) -> None:
    with importable_copy(PROJECTS / "ecosystem", tmp_path / "ecosystem") as root:
        pyproject = root / "pyproject.toml"
        pyproject.write_text(
            pyproject.read_text()
            + '\n[tool.lowerd.targets.whole]\nentry = "models/decoder.py:make"\n'
            'whole_program = { backend_id = "XnnpackBackend" }\n'
        )
        config = load_config(pyproject)
        forget_project_modules(root)
        result = build_target(config, config.targets["whole"], None)
        assert result.status == "error" and result.error is not None
        assert result.error.kind == "entry-error"
        assert "'forward' has keyword example inputs (input_ids, cache_position)" in (
            result.error.message
        )
        assert (result.error.file, result.error.line) == line_marks(root)["decoder.make"]


def test_a_method_whose_kwargs_are_not_a_dict_is_refused(tmp_path: Path) -> None:
    with importable_copy(PROJECTS / "ecosystem", tmp_path / "ecosystem") as root:
        decoder = root / "models" / "decoder.py"
        decoder.write_text(decoder.read_text().replace("kwargs=inputs()", "kwargs=[1]"))
        config = load_config(root / "pyproject.toml")
        forget_project_modules(root)
        result = build_target(config, config.targets["decoder"], None)
        assert result.status == "error" and result.error is not None
        assert "kwargs is a list, expected a dict of keyword example inputs" in (
            result.error.message
        )


def test_method_imports_without_torch() -> None:
    script = "import sys\nfrom lowerd import Method\nprint('torch' in sys.modules)\n"
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == "False"
    assert "lowerd.project.method" in run.stderr  # importtime's account: Method was imported
    assert " torch" not in run.stderr


# Config ----------------------------------------------------------------------------------------


def test_the_names_are_executorchs() -> None:
    """Drift: MemoryPlanningPass's arguments, the algorithms and the shape-evaluation passes
    named in config are ExecuTorch's."""
    import inspect

    from executorch.exir import memory_planning
    from executorch.exir.passes import MemoryPlanningPass, sym_shape_eval_pass

    parameters = inspect.signature(MemoryPlanningPass.__init__).parameters
    assert set(compile_configs.MEMORY_PLANNING) == set(parameters) - {"self"}
    for name, kind in compile_configs.MEMORY_PLANNING.items():
        default = parameters[name].default
        if kind.kind == "bool":
            assert isinstance(default, bool), name
        if kind.kind == "int":
            assert isinstance(default, int) and not isinstance(default, bool), name
    for algorithm in compile_configs.MEMORY_PLANNING_ALGOS:
        assert "specs" in inspect.signature(getattr(memory_planning, algorithm)).parameters
    for class_name in compile_configs.SYM_SHAPE_EVAL_PASSES.values():
        assert isinstance(getattr(sym_shape_eval_pass, class_name), type)


HEAD = """\
[tool.lowerd.targets.a]
entry = "a.py:make"
"""


def test_project_defaults_are_laid_over_key_by_key(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(
        '[tool.lowerd]\nexport.no_grad = true\nsym_shape_eval = "hint"\n'
        "memory_planning = { alloc_graph_input = false, alignment = 32 }\n"
        + HEAD
        + 'export = { strict = true, module_passes = "p.py:passes" }\n'
        "memory_planning.alignment = 64\n"
        '[tool.lowerd.targets.b]\nentry = "a.py:make"\nexport.no_grad = false\n'
    )
    config = load_config(path)
    a, b = config.targets["a"], config.targets["b"]
    assert (a.export.strict, a.export.no_grad) == (True, True)
    assert a.export.module_passes is not None and a.export.module_passes.line == 7
    assert a.memory_planning == {"alloc_graph_input": False, "alignment": 64}
    assert a.sym_shape_eval == b.sym_shape_eval == "hint"
    assert b.lowering_options() == {
        "memory_planning": {"alloc_graph_input": False, "alignment": 32},
        "sym_shape_eval": "hint",
    }
    assert a.lowering_options()["export"] == {
        "strict": True,
        "no_grad": True,
        "module_passes": "p.py:passes",
    }


@pytest.mark.parametrize(
    ("text", "line", "parts"),
    [
        ("export = true\n", 3, ["export must be a table like { strict = true }"]),
        (
            "[tool.lowerd.targets.a.export]\nstrickt = true\n",
            4,
            ["unknown key 'strickt' in export (did you mean 'strict'?)", "no_grad"],
        ),
        ("export.no_grad = 1\n", 3, ["no_grad must be true or false, got the integer 1"]),
        ('export.module_passes = "passes.py"\n', 3, ["module_passes 'passes.py' must name"]),
        (
            "\nmemory_planning.alloc_graph_inputs = false\n",
            4,
            ["unknown memory_planning field 'alloc_graph_inputs' (did you mean "],
        ),
        (
            'memory_planning.memory_planning_algo = "greedyy"\n',
            3,
            ["'greedyy' (did you mean 'greedy'?)", "greedy, naive"],
        ),
        ("memory_planning.alignment = 0\n", 3, ["alignment must be a positive integer"]),
        (
            "[tool.lowerd.targets.a.memory_planning]\nalloc_mutable_buffers = false\n"
            "share_mutable_buffers = true\n",
            5,
            ["share_mutable_buffers needs alloc_mutable_buffers"],
        ),
        ('sym_shape_eval = "hints"\n', 3, ["sym_shape_eval must be one of 'hint', 'constraint'"]),
        (
            "memory_planning = []\n",
            3,
            ["memory_planning must be a table of fields like [tool.lowerd.memory_planning]"],
        ),
        (
            'recipe = "xnnpack_fp32"\nexport.strict = true\n',
            4,
            ["export does not apply to a recipe target (the recipe exports as it says)"],
        ),
    ],
    ids=[
        "export-not-a-table",
        "unknown-export-key",
        "no-grad-not-a-flag",
        "passes-no-function",
        "unknown-planning-field",
        "unknown-algorithm",
        "alignment-zero",
        "share-without-alloc",
        "unknown-shape-eval",
        "planning-not-a-table",
        "recipe-exports",
    ],
)
def test_config_errors_at_their_line(
    tmp_path: Path, text: str, line: int, parts: list[str]
) -> None:
    assert_config_error(tmp_path, HEAD + text, line, parts)
