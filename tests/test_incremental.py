"""Rebuilds scale with the edit: up-to-date checks; an unchanged program keeps its .pte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project.build_state import load_state, why_out_of_date
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.report_model import MethodReport
from lowerd.project.result import TargetResult

from stock import forget_project_modules, sha256, stock_pte


def build(config: ProjectConfig, name: str, store: BlobStore) -> TargetResult:
    forget_project_modules(config.root)
    result = build_target(config, config.targets[name], store)
    assert result.status == "ok", result.error
    return result


def stale(config: ProjectConfig, name: str) -> str | None:
    target = config.targets[name]
    return why_out_of_date(config, target, load_state(config, target))


def _cumsum_line(report: MethodReport) -> int | None:
    return next(op.line for op in report.not_delegated if "cumsum" in op.op)


def test_comment_edit_keeps_the_pte_and_moves_report_lines(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    store = BlobStore(tmp_path / "cache")
    first = build(config, "refused", store)
    cumsum_line = _cumsum_line(first.methods["forward"])

    # A statement the program does not use moves the code (a comment alone would not even
    # run the entry: test_token_keep.py).
    model = project / "models" / "refused.py"
    model.write_text("# a new comment\nUNUSED = 'not the program'\n" + model.read_text())
    assert stale(config, "refused") == f"{model} changed"

    again = build(config, "refused", store)
    assert again.reused == "same-program"
    assert again.sha256 == first.sha256 == sha256(Path(again.output).read_bytes())
    assert again.sha256 == sha256(stock_pte(project, "models/refused.py:make", ["xnnpack"]))
    assert _cumsum_line(again.methods["forward"]) == cumsum_line + 2
    assert stale(config, "refused") is None


def test_a_real_edit_is_lowered_again(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    store = BlobStore(tmp_path / "cache")
    build(config, "tiny_linear", store)
    model = project / "models" / "tiny_linear.py"
    model.write_text(model.read_text().replace("nn.ReLU()", "nn.Hardtanh()"))

    again = build(config, "tiny_linear", store)
    assert again.reused is None and again.cache.misses == 1
    assert again.sha256 == sha256(stock_pte(project, "models/tiny_linear.py:make", ["xnnpack"]))


def test_files_the_entry_reads_are_inputs(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scale = project / "models" / "scale.txt"
    scale.write_text("0.5\n")
    model = project / "models" / "tiny_linear.py"
    model.write_text(
        model.read_text().replace(
            "    torch.manual_seed(0)\n",
            "    torch.manual_seed(0)\n    factor = float(open('models/scale.txt').read())\n",
        )
    )
    config = load_config(project / "pyproject.toml")
    monkeypatch.chdir(project)  # the entry opens a path relative to the cwd, as scripts do
    build(config, "tiny_linear", BlobStore(tmp_path / "cache"))
    recorded = {s.path for s in load_state(config, config.targets["tiny_linear"]).sources}
    assert {str(scale), str(model)} <= recorded
    assert stale(config, "tiny_linear") is None

    os.utime(scale, ns=(1, 1))  # touched, same content: the digest decides
    assert stale(config, "tiny_linear") is None
    scale.write_text("0.25\n")
    assert stale(config, "tiny_linear") == f"{scale} changed"


def test_a_modified_output_is_rebuilt(project: Path, tmp_path: Path) -> None:
    config = load_config(project / "pyproject.toml")
    result = build(config, "tiny_linear", BlobStore(tmp_path / "cache"))
    Path(result.output).write_bytes(b"not a program")
    assert stale(config, "tiny_linear") == "output missing or modified"
    again = build(config, "tiny_linear", BlobStore(tmp_path / "cache"))
    assert again.reused is None and again.sha256 == result.sha256


def test_an_edit_shows_the_last_builds_report_at_the_moved_lines_until_partitioned(
    project: Path, tmp_path: Path
) -> None:
    config = load_config(project / "pyproject.toml")
    store = BlobStore(tmp_path / "cache")
    cumsum_line = _cumsum_line(build(config, "refused", store).methods["forward"])

    model = project / "models" / "refused.py"
    edited = model.read_text().replace("return self.fc2(x)", "return torch.relu(self.fc2(x))")
    model.write_text("# a line above everything\n" + edited)
    shown: list[MethodReport] = []
    forget_project_modules(project)
    again = build_target(
        config, config.targets["refused"], store, on_partitioned=lambda _, r: shown.append(r)
    )

    assert again.status == "ok" and again.reused is None
    provisional, partitioned = shown  # the last build's first, then the edited program's
    assert provisional.provisional and not provisional.final
    assert _cumsum_line(provisional) == cumsum_line + 1
    assert not partitioned.provisional
    assert again.sha256 == sha256(stock_pte(project, "models/refused.py:make", ["xnnpack"]))


def test_a_source_saved_while_the_build_runs_leaves_no_record(
    project: Path, tmp_path: Path
) -> None:
    """The build may have read the old text: a record stamped with the new one would call the
    edited target up to date and serve the old program's report."""
    config = load_config(project / "pyproject.toml")
    model = project / "models" / "tiny_linear.py"
    edited = model.read_text().replace("nn.ReLU()", "nn.Hardtanh()")
    forget_project_modules(project)
    result = build_target(
        config,
        config.targets["tiny_linear"],
        BlobStore(tmp_path / "cache"),
        on_partitioned=lambda *_: model.write_text(edited),  # the editor saves mid-build
    )
    assert result.status == "ok"
    assert stale(config, "tiny_linear") == "never built"
