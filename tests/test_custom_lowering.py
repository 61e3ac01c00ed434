"""[tool.lowerd] `partitioners = "file.py:fn"` (custom partitioners instead of `backends`) and
`whole_program = { backend_id, compile_specs }` (each method lowered whole to one backend by
backend_api.to_backend): config errors at their lines, the .pte equal to the stock script's, a
refusal blamed at the entry with the backend's message."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project.build_state import load_state, target_inputs_digest
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.located import Located
from lowerd.project.result import TargetResult

from helpers import assert_config_error, write_pyproject
from stock import PROJECTS, call_entry, forget_project_modules, importable_copy, sha256, stock_pte

# Config ---------------------------------------------------------------------------------------


def test_keys_read_and_digested(tmp_path: Path) -> None:
    config = load_config(
        write_pyproject(
            tmp_path,
            """\
            [tool.lowerd]
            backends = ["xnnpack"]

            [tool.lowerd.targets.custom]
            entry = "a.py:make"
            partitioners = "parts.py:partitioners"

            [tool.lowerd.targets.whole]
            entry = "a.py:make"
            whole_program = { backend_id = "XnnpackBackend", compile_specs = { k = "v" } }

            [tool.lowerd.targets.plain]
            entry = "a.py:make"
            """,
        )
    )
    custom, whole, plain = (config.targets[n] for n in ("custom", "whole", "plain"))
    assert custom.partitioners == Located("parts.py:partitioners", 6)
    assert custom.lowering_options() == {"partitioners": "parts.py:partitioners"}
    whole_program = {"backend_id": "XnnpackBackend", "compile_specs": {"k": "v"}}
    assert whole.whole_program == Located(whole_program, 10)
    assert whole.lowering_options() == {"whole_program": whole_program}
    digests = {target_inputs_digest(config, t) for t in (custom, whole, plain)}
    assert len(digests) == 3


@pytest.mark.parametrize(
    ("text", "line", "parts"),
    [
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            backends = ["xnnpack"]
            partitioners = "parts.py:make"
            """,
            4,
            ["partitioners and backends", "keep one"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            partitioners = "models/parts.txt:make"
            """,
            3,
            ["partitioners file 'models/parts.txt' is not a Python file"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            partitioners = "parts.py:make"
            whole_program = { backend_id = "XnnpackBackend" }
            """,
            4,
            ["whole_program and partitioners"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            backends = ["xnnpack"]
            whole_program = { backend_id = "XnnpackBackend" }
            """,
            4,
            ["whole_program and backends"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"

            [tool.lowerd.targets.a.whole_program]
            backend_id = "XnnpackBackend"
            compile_specs = { level = 3 }
            """,
            6,
            ["compile spec level must be a string"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"

            [tool.lowerd.targets.a.whole_program]
            backend = "XnnpackBackend"
            """,
            5,
            ["unknown key 'backend' in whole_program", "did you mean 'backend_id'"],
        ),
        (
            """\
            [tool.lowerd.targets.a]
            entry = "a.py:make"
            transform_passes = "p.py:passes"
            whole_program = { backend_id = "XnnpackBackend" }
            """,
            3,
            ["transform_passes is for to_edge_transform_and_lower"],
        ),
    ],
    ids=[
        "with-backends",
        "not-python",
        "whole-and-partitioners",
        "whole-and-backends",
        "spec-not-string",
        "unknown-key",
        "whole-and-passes",
    ],
)
def test_config_errors_at_their_line(
    tmp_path: Path, text: str, line: int, parts: list[str]
) -> None:
    assert_config_error(tmp_path, text, line, parts)


# Lowering -------------------------------------------------------------------------------------

PARTITIONERS = '''\
"""The user's partitioners: XNNPACK's, as a script would make it."""

from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner


def partitioners():
    return [XnnpackPartitioner()]


def not_a_list():  # LINE-MARK: not_a_list
    return XnnpackPartitioner()
'''

TARGETS = """
[tool.lowerd.targets.custom]
entry = "models/refused.py:make"
partitioners = "parts.py:partitioners"

[tool.lowerd.targets.whole]
entry = "models/tiny_linear.py:make"
whole_program = { backend_id = "XnnpackBackend" }

[tool.lowerd.targets.whole_dynamic]
entry = "models/dynamic.py:make"
whole_program = { backend_id = "XnnpackBackend" }

[tool.lowerd.targets.whole_refused]
entry = "models/refused.py:make"
whole_program = { backend_id = "XnnpackBackend" }
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    with importable_copy(PROJECTS / "basic", tmp_path / "basic") as root:
        (root / "parts.py").write_text(PARTITIONERS)
        pyproject = root / "pyproject.toml"
        text = pyproject.read_text().replace('backends = ["xnnpack"]\n', "")
        pyproject.write_text(text + TARGETS)
        yield root


def _build(config: ProjectConfig, name: str, store: BlobStore | None) -> TargetResult:
    forget_project_modules(config.root)
    return build_target(config, config.targets[name], store)


def test_custom_partitioners_equal_stock_and_hit_the_cache(project: Path, tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "cache")
    config = load_config(project / "pyproject.toml")
    result = _build(config, "custom", store)
    assert result.status == "ok", result.error
    stock = stock_pte(PROJECTS / "basic", "models/refused.py:make", ["xnnpack"])
    assert result.sha256 == sha256(stock)
    assert result.options == {"partitioners": "parts.py:partitioners"}
    assert {p.backend for m in result.methods.values() for p in m.partitions} == {"XNNPACK"}
    state = load_state(config, config.targets["custom"])
    assert state is not None
    assert str((project / "parts.py").resolve()) in {s.path for s in state.sources}

    # The same program again: never the same-program shortcut (the partitioners are code the
    # program's digest cannot see), but the blobs come from the cache.
    again = _build(config, "custom", store)
    assert again.status == "ok" and again.reused is None
    assert again.sha256 == result.sha256
    assert again.cache.hits > 0 and again.cache.misses == 0


def test_partitioners_returning_no_list_is_blamed_at_the_function(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace("parts.py:partitioners", "parts.py:not_a_list")
    )
    config = load_config(pyproject)
    result = _build(config, "custom", None)
    assert result.status == "error" and result.error is not None
    assert "returned a XnnpackPartitioner" in result.error.message
    line = next(
        i
        for i, text in enumerate((project / "parts.py").read_text().splitlines(), 1)
        if "LINE-MARK: not_a_list" in text
    )
    assert (result.error.file, result.error.line) == ("parts.py", line)


def _stock_whole_program(root: Path, entry: str) -> str:
    """ExecuTorch's documented whole-module lowering: to_backend, the lowered module called by
    a module that is exported and taken to edge again, then to_executorch."""
    import torch
    from executorch.exir import to_edge
    from executorch.exir.backend.backend_api import to_backend

    class Composite(torch.nn.Module):
        def __init__(self, lowered_module: torch.nn.Module):
            super().__init__()
            self.lowered_module = lowered_module

        def forward(self, *args: torch.Tensor) -> torch.Tensor:
            return self.lowered_module(*args)

    module, args, *shapes = call_entry(root, entry)
    dynamic_shapes = shapes[0] if shapes else None
    edge = to_edge(torch.export.export(module, args, dynamic_shapes=dynamic_shapes))
    lowered = to_backend("XnnpackBackend", edge.exported_program(), [])
    # The composite takes `*args`: its shapes are one entry holding a shape per argument.
    composite_shapes = None if dynamic_shapes is None else {"args": dynamic_shapes}
    composite = torch.export.export(Composite(lowered), args, dynamic_shapes=composite_shapes)
    program = to_edge(composite).to_executorch()
    return sha256(bytes(program.buffer))


def test_whole_program_equals_stock_and_a_refusal_is_blamed(project: Path, tmp_path: Path) -> None:
    store = BlobStore(tmp_path / "cache")
    config = load_config(project / "pyproject.toml")
    result = _build(config, "whole", store)
    assert result.status == "ok", result.error
    assert result.sha256 == _stock_whole_program(project, "models/tiny_linear.py:make")
    whole_program = {"backend_id": "XnnpackBackend", "compile_specs": {}}
    assert result.options == {"whole_program": whole_program}
    [report] = result.methods.values()
    assert [p.backend for p in report.partitions] == ["XNNPACK"]
    assert report.ops_delegated == report.ops and not report.not_delegated

    # A batch dimension that varies (1..64) is lowered with its range, as the stock script's.
    dynamic = _build(config, "whole_dynamic", store)
    assert dynamic.status == "ok", dynamic.error
    assert dynamic.sha256 == _stock_whole_program(project, "models/dynamic.py:make")

    refused = _build(config, "whole_refused", store)
    assert refused.status == "error" and refused.error is not None
    assert refused.error.kind == "lowering-error"
    assert "XNNPACK refused method 'forward'" in refused.error.message
    assert "is not supported in XNNPACK Delegate" in refused.error.message
    entry = refused.entry
    assert entry is not None and (refused.error.file, refused.error.line) == (
        entry.file,
        entry.line,
    )
