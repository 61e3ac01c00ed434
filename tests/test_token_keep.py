"""An edit of comments and layout keeps the .pte without running the entry, its lines moved
(lowering/token_keep.py); anything else the keep cannot prove is built as before."""

from __future__ import annotations

import importlib.util
import linecache
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lowerd.lowering.build import build_target
from lowerd.lowering.inputs import InputRecorder
from lowerd.project.build_state import load_state, why_out_of_date
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.library_stamp import LibraryStamp
from lowerd.project.result import TargetResult
from lowerd.project.source_map import UserFiles
from lowerd.project.source_tokens import compiles, line_map, source_tokens
from lowerd.project.wire import encode

from helpers import PROJECTS
from stock import forget_project_modules, importable_copy, sha256

# The token streams --------------------------------------------------------------------------

BEFORE = b'''"""Doc."""
import torch


def f(x, y):
    z = x + y  # sum
    return g(z,
             y)
'''
# Comments, blank lines, spaces, a line joined and a trailing newline dropped: the same tokens.
AFTER = b'''"""Doc."""
# a comment above
import torch



def f( x,y ):   # spaced
    # a comment line
    z = x+y
    return g(z, y)'''


def test_comments_blank_lines_and_spaces_keep_the_stream_and_move_its_lines() -> None:
    before, after = source_tokens(BEFORE), source_tokens(AFTER)
    assert before is not None and after is not None
    lines = line_map(before, after)
    assert lines is not None
    # import, def, z = ..., return, and the continuation line joined into the return's
    assert [lines.move(n) for n in (2, 5, 6, 7, 8)] == [3, 7, 9, 10, 10]
    assert lines.move(4) is None  # a blank line: no token starts there


@pytest.mark.parametrize(
    "edited",
    [
        BEFORE.replace(b'"""Doc."""', b'"""Other doc."""'),  # a docstring is a string
        BEFORE.replace(b"x + y", b"x - y"),
        BEFORE.replace(b"    z = x", b"  z = x").replace(b"    return", b"  return"),  # indent
        b"# -*- coding: latin-1 -*-\n" + BEFORE,  # the encoding cookie is a token's
        BEFORE.replace(b"# sum", b"# type: (int, int) -> int"),  # TorchScript reads it
        # a newline is a token: `g(z)` on two lines is `g` then `(z)`
        BEFORE.replace(b"    return g(z,", b"    w = g\n    (z,"),
    ],
    ids=["docstring", "operator", "indentation", "cookie", "type-comment", "newline"],
)
def test_what_the_interpreter_reads_is_a_change(edited: bytes) -> None:
    before, after = source_tokens(BEFORE), source_tokens(edited)
    assert before is not None and after is not None
    assert line_map(before, after) is None


def test_a_line_split_in_two_has_no_place_but_its_neighbours_do() -> None:
    split = BEFORE.replace(b"    z = x + y  # sum", b"    z = x + \\\n        y")
    before, after = source_tokens(BEFORE), source_tokens(split)
    assert before is not None and after is not None
    lines = line_map(before, after)
    assert lines is not None and lines.move(6) is None and lines.move(5) == 5
    assert lines.move(7) == 8


def test_what_does_not_tokenize_or_compile_is_no_stream() -> None:
    assert source_tokens(b's = "unterminated\n') is None
    assert source_tokens(b"x = 1  # \xff not utf-8\n") is None
    assert source_tokens(b"x = $\n") is None
    assert source_tokens(b"return 1\n") is not None and not compiles(b"return 1\n", "m.py")
    assert compiles(BEFORE, "m.py")


def test_a_library_file_touched_is_a_change(tmp_path: Path) -> None:
    library = tmp_path / "library.py"
    library.write_text("x = 1\n")
    stamp = LibraryStamp.of([str(library)])
    assert stamp.unchanged()
    os.utime(library, ns=(1, 1))
    assert not stamp.unchanged()
    stamp = LibraryStamp.of([str(library)])
    library.unlink()
    assert not stamp.unchanged()


def test_the_recorder_tells_code_reads_from_data_reads(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    imported, looked_up, read, inspected = (root / f"{name}.py" for name in "abcd")
    for module in (imported, looked_up, read):
        module.write_text("X = 1\n")
    inspected.write_text("def marked():\n    return 1\n")
    inspecting = root / "inspecting.py"
    inspecting.write_text("import inspect\n\n\ndef source(f):\n    return inspect.getsource(f)\n")
    recorder = InputRecorder(UserFiles(root), exclude=root / "build")
    with recorder.recording():
        _import(imported)  # the import system's read
        linecache.getlines(str(looked_up))  # a library's traceback line (this test's frame)
        read.read_bytes()  # an open of the file: a data read
        # The project's code reading its own source: a data read, though imported too.
        assert "return 1" in _import(inspecting).source(_import(inspected).marked)
    assert recorder.read_as_data() == {read.resolve(), inspected.resolve()}
    assert {imported, looked_up} <= {Path(p) for p in recorder.opened}


def _import(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"token_keep_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A build, edited --------------------------------------------------------------------------------

MODEL = "models/refused.py"
TABLE = "models/table.py"
READ_TABLE = "    Path(__file__).with_name('table.py').read_text()\n"


@dataclass
class Built:
    config: ProjectConfig
    first: TargetResult
    kept: TargetResult  # after a comment edit
    kept_again: TargetResult  # after another, from the record the keep wrote
    stages: list[str]  # of the two kept builds
    full: TargetResult  # lowered afresh on the same text


def _build(config: ProjectConfig, stages: list[str] | None = None, **kwargs: Any) -> TargetResult:
    forget_project_modules(config.root)

    def progress(stage: str, target: str, detail: str | None) -> None:
        if stages is not None:
            stages.append(stage)

    return build_target(config, config.targets["refused"], None, progress, **kwargs)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    destination = tmp_path_factory.mktemp("token_keep") / "basic"
    with importable_copy(PROJECTS / "basic", destination) as root:
        config = load_config(root / "pyproject.toml")
        model = root / MODEL
        (root / TABLE).write_text("SCALE = 1\n")  # a Python file the entry reads as data
        text = model.read_text().replace(
            "import torch\n", "from pathlib import Path\n\nimport torch\n"
        )
        model.write_text(text.replace("def make():\n", f"def make():\n{READ_TABLE}"))
        first = _build(config)
        text = model.read_text()
        model.write_text("# a comment\n\n" + text.replace("x**3  #", "x ** 3  # cubed;"))
        stages: list[str] = []
        kept = _build(config, stages)
        edited = model.read_text().replace("    def forward", "    # the forward\n    def forward")
        model.write_text(
            edited.replace("        return self.fc2(x)", "\n        return self.fc2( x )")
        )
        kept_again = _build(config, stages)
        full = _build(config, reuse=False)
        yield Built(config, first, kept, kept_again, stages, full)


def _facts(result: TargetResult) -> dict[str, Any]:
    """The encoded result without what differs between runs: times, cache outcomes, why kept,
    and the way edge generation ran (none ran for a kept .pte)."""
    facts = encode(result)
    for key in ("seconds", "cache", "reused", "memo"):
        facts.pop(key, None)
    for method in facts["methods"].values():
        method.pop("edge_generation", None)
    return facts


def test_a_comment_edit_keeps_the_pte_without_running_the_entry(built: Built) -> None:
    assert built.kept.reused == built.kept_again.reused == "same-source"
    assert built.stages == []  # no load, no export: nothing of the build ran
    assert built.kept.sha256 == built.first.sha256 == built.full.sha256
    assert sha256(Path(built.kept.output or "").read_bytes()) == built.full.sha256


def test_the_kept_result_names_the_lines_a_full_build_names(built: Built) -> None:
    assert _facts(built.kept_again) == _facts(built.full)
    assert built.kept_again.methods["forward"].edge_generation is None  # none ran
    assert built.full.methods["forward"].edge_generation is not None
    first, kept = built.first.methods["forward"], built.kept_again.methods["forward"]
    assert [op.line for op in kept.not_delegated] == [
        (op.line or 0) + 3 for op in first.not_delegated
    ]
    assert built.kept_again.entry is not None and built.first.entry is not None
    assert built.kept_again.entry.line == built.first.entry.line + 4


def test_the_kept_record_stands_and_says_why(built: Built) -> None:
    # The record written by the keep was read by the second keep; the full build's replaced it.
    config = built.config
    target = config.targets["refused"]
    assert why_out_of_date(config, target, load_state(config, target)) is None


def test_an_edit_the_interpreter_reads_runs_the_entry(built: Built) -> None:
    model = built.config.root / MODEL
    model.write_text(model.read_text().replace('"""Two ops', '"""The two ops', 1))
    again = _build(built.config)
    assert again.reused == "same-program" and again.sha256 == built.full.sha256


def test_a_split_line_the_report_names_runs_the_entry(built: Built) -> None:
    model = built.config.root / MODEL
    text = model.read_text()
    split = text.replace("torch.cumsum(x, dim=1)", "torch.cumsum(\n            x, dim=1)")
    assert split != text
    model.write_text(split)
    again = _build(built.config)
    assert again.reused == "same-program"
    cumsum = [op for op in again.methods["forward"].not_delegated if "cumsum" in op.op]
    assert cumsum and split.splitlines()[(cumsum[0].line or 0) - 1].strip().startswith("x =")


def test_lowerd_build_keeps_it_without_importing_torch(built: Built) -> None:
    model = built.config.root / MODEL
    model.write_text("# one more comment\n" + model.read_text())
    script = (
        "import sys; from lowerd.cli.main import main; "
        "code = main(['build', 'refused', '--no-daemon', '--config', sys.argv[1]]); "
        "print(code, 'torch' in sys.modules)"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(built.config.path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "only comments or layout changed: kept the .pte" in run.stdout, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "0 False"  # built, and torch never imported
    assert sha256(Path(built.full.output or "").read_bytes()) == built.full.sha256


def test_a_python_file_read_as_data_is_not_kept_on_tokens(built: Built) -> None:
    config, target = built.config, built.config.targets["refused"]
    state = load_state(config, target)
    assert state is not None
    root = config.root.resolve()
    assert str(root / MODEL) in state.source_tokens
    assert str(root / TABLE) in {source.path for source in state.sources}
    assert str(root / TABLE) not in state.source_tokens
    table = config.root / TABLE
    table.write_text("# a comment in a file read as data\n" + table.read_text())
    again = _build(config)
    assert again.reused == "same-program"


def test_a_comment_the_tokenizer_cannot_decode_is_left_to_the_build(built: Built) -> None:
    # CPython compiles a comment that is not UTF-8; `tokenize` refuses it: no keep on tokens.
    model = built.config.root / MODEL
    model.write_bytes(b"# caf\xe9\n" + model.read_bytes())
    again = _build(built.config)
    assert again.reused == "same-program" and again.sha256 == built.full.sha256


def test_a_syntax_error_is_the_builds_to_report_at_its_line(built: Built) -> None:
    model = built.config.root / MODEL
    text = model.read_bytes().decode("latin-1")
    model.write_text(text.replace("x = x ** 3", "x = x ** 3 $"), encoding="latin-1")
    failed = _build(built.config)
    assert failed.status == "error" and failed.error is not None
    line = next(n for n, t in enumerate(model.read_text("latin-1").splitlines(), 1) if "$" in t)
    assert (failed.error.file, failed.error.line) == (MODEL, line)
