"""The daemon's pure parts: build result JSON -> what an editor shows (diagnostics, entry sites),
and the editor's settings.

The results are written in TargetResult.to_json()'s shape (files relative to the project root),
over a small project in tmp_path whose lines are found by their LINE-MARK comments.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from lowerd.daemon.diagnostics import (
    PROVISIONAL_NOTE,
    Site,
    config_error_diagnostics,
    coverage_summary,
    hover_markdown,
    lens_title,
    line_range,
    merge,
    read_lines_from_disk,
    result_diagnostics,
)
from lowerd.daemon.entry_site import entry_site
from lowerd.daemon.settings import DEFAULT_TIMEOUT, Settings
from lowerd.lowering.config import load_config

MODEL = """\
import torch
from torch import nn


class Refused(nn.Module):  # LINE-MARK: module
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)  # LINE-MARK: fc1
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        x = self.fc1(x)  # LINE-MARK: linear1
        x = x**3  # LINE-MARK: pow
        x = torch.cumsum(torch.cumsum(x, dim=1), dim=0)  # LINE-MARK: cumsum
        return self.fc2(x)  # LINE-MARK: linear2


def make():  # LINE-MARK: entry
    return Refused().eval(), (torch.randn(2, 8),)
"""

PYPROJECT = """\
[tool.lowerd]
[tool.lowerd.targets.refused]
entry = "models/refused.py:make"  # LINE-MARK: entry.refused
[tool.lowerd.targets.pkg]
entry = "pkg.nets:make"
[tool.lowerd.targets.gone]
entry = "models/refused.py:no_such_function"  # LINE-MARK: entry.gone
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "refused.py").write_text(MODEL)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "nets.py").write_text("def make():  # LINE-MARK: pkg\n    pass\n")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


def mark(root: Path, name: str) -> Site:
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".toml"):
            for number, text in enumerate(path.read_text().splitlines(), start=1):
                if re.search(rf"LINE-MARK: {re.escape(name)}\s*$", text):
                    return Site(path, number)
    raise AssertionError(f"no LINE-MARK {name}")


def report(root: Path, **overrides: Any) -> dict[str, Any]:
    """A final MethodReport JSON of MODEL: two XNNPACK partitions, pow and 2 cumsums refused."""
    line = {name: mark(root, name).line for name in ("linear1", "pow", "cumsum", "linear2")}
    no_cumsum = "no XNNPACK support for aten.cumsum.default"
    base = {
        "delegated_nodes": 2,
        "non_delegated_nodes": 5,
        "subgraphs": 2,
        "ops": 5,
        "ops_delegated": 2,
        "coverage": 0.4,
        "backends": {"XNNPACK": {"ops": 2, "partitions": 2}},
        "partitions": [partition(line["linear1"], "hit"), partition(line["linear2"], "miss")],
        "not_delegated": [
            refused("aten.pow.Tensor_Scalar", line["pow"], "only support power == 2, got 3"),
            refused("aten.cumsum.default", line["cumsum"], no_cumsum),
            refused("aten.cumsum.default", line["cumsum"], no_cumsum),
        ],
        "final": True,
    }
    return {**base, **overrides}


def partition(line: int, cache: str | None) -> dict[str, Any]:
    sources = [["models/refused.py", line, "aten.linear.default"]]
    return {"backend": "XNNPACK", "ops": 1, "cache": cache, "sources": sources}


def refused(op: str, line: int | None, reason: str) -> dict[str, Any]:
    file = "models/refused.py" if line else None
    return {"op": op, "file": file, "line": line, "reason": reason, "node": op.split(".")[1]}


def ok_result(root: Path, **methods: dict[str, Any]) -> dict[str, Any]:
    entry, module = mark(root, "entry"), mark(root, "module")
    return {
        "name": "refused",
        "status": "ok",
        "methods": methods or {"forward": report(root)},
        "error": None,
        "entry": {"file": "models/refused.py", "line": entry.line},
        "modules": {"forward": {"file": "models/refused.py", "line": module.line, "name": "R"}},
    }


def error_result(kind: str, file: str | None, line: int | None) -> dict[str, Any]:
    return {
        "name": "refused",
        "status": "error",
        "methods": {},
        "error": {"kind": kind, "message": "it broke", "file": file, "line": line},
        "entry": None,
        "modules": {},
    }


def at(diagnostics: list[types.Diagnostic], line: int) -> list[types.Diagnostic]:
    return [d for d in diagnostics if d.range.start.line == line - 1]


# Coverage text -------------------------------------------------------------------------------


def test_coverage_summary_names_backend_partitions_and_percent_rounded_down() -> None:
    summary = {
        "ops": 271,
        "ops_delegated": 231,
        "coverage": 0.8524,
        "backends": {"XNNPACK": {"ops": 231, "partitions": 42}},
    }
    assert coverage_summary("forward", summary) == (
        "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)"
    )
    almost = {**summary, "ops_delegated": 270, "coverage": 0.9963}
    assert coverage_summary("forward", almost).endswith("(99 %)")


def test_coverage_summary_with_one_partition_several_backends_and_none() -> None:
    xnnpack = {"XNNPACK": {"ops": 2, "partitions": 1}}
    one = {"ops": 2, "ops_delegated": 2, "coverage": 1.0, "backends": xnnpack}
    assert coverage_summary("encode", one) == "encode: 2 of 2 ops on XNNPACK in 1 partition (100 %)"
    two = {
        "ops": 10,
        "ops_delegated": 9,
        "coverage": 0.9,
        "backends": {"XNNPACK": {"ops": 6, "partitions": 2}, "Vulkan": {"ops": 3, "partitions": 1}},
    }
    assert coverage_summary("forward", two) == (
        "forward: 9 of 10 ops delegated (6 on XNNPACK in 2 partitions, 3 on Vulkan in 1 partition;"
        " 90 %)"
    )
    none = {"ops": 3, "ops_delegated": 0, "coverage": 0.0, "backends": {}}
    assert coverage_summary("forward", none) == "forward: 0 of 3 ops delegated (0 %)"


# Diagnostics of a successful build -------------------------------------------------------------


def test_refused_ops_warn_at_their_lines_with_op_and_reason(root: Path) -> None:
    found = result_diagnostics(ok_result(root), root, None, "warning")
    model = found[root / "models" / "refused.py"]
    [pow_warning] = at(model, mark(root, "pow").line)
    assert pow_warning.code == "not-delegated"
    assert pow_warning.source == "lowerd"
    assert pow_warning.severity == types.DiagnosticSeverity.Warning
    assert "aten.pow.Tensor_Scalar" in pow_warning.message
    assert "only support power == 2, got 3" in pow_warning.message
    # Two cumsums on one line are one diagnostic that counts them.
    [cumsum] = at(model, mark(root, "cumsum").line)
    assert "aten.cumsum.default ×2" in cumsum.message
    assert "no XNNPACK support" in cumsum.message
    # Delegated lines get nothing.
    assert not at(model, mark(root, "linear1").line)


def test_the_last_builds_report_shown_during_an_edit_says_so_on_every_line(root: Path) -> None:
    provisional = report(root, final=False, provisional=True)
    found = result_diagnostics(ok_result(root, forward=provisional), root, None, "warning")
    model = found[root / "models" / "refused.py"]
    assert model and all(PROVISIONAL_NOTE in d.message for d in model)
    final = result_diagnostics(ok_result(root), root, None, "warning")
    assert not any(PROVISIONAL_NOTE in d.message for d in final[root / "models" / "refused.py"])


def test_coverage_information_at_entry_and_module_class(root: Path) -> None:
    model = result_diagnostics(ok_result(root), root, None, "warning")[root / "models/refused.py"]
    expected = "forward: 2 of 5 ops on XNNPACK in 2 partitions (40 %)"
    [at_entry] = at(model, mark(root, "entry").line)
    [at_module] = at(model, mark(root, "module").line)
    for diagnostic in (at_entry, at_module):
        assert diagnostic.severity == types.DiagnosticSeverity.Information
        assert diagnostic.code == "coverage"
        assert expected in diagnostic.message
    assert at_entry.message == f"refused: {expected}"


@pytest.mark.parametrize(
    ("setting", "severity"),
    [
        ("hint", types.DiagnosticSeverity.Hint),
        ("information", types.DiagnosticSeverity.Information),
    ],
)
def test_not_delegated_severity_is_configurable(
    root: Path, setting: str, severity: types.DiagnosticSeverity
) -> None:
    model = result_diagnostics(ok_result(root), root, None, setting)[root / "models/refused.py"]
    [pow_warning] = at(model, mark(root, "pow").line)
    assert pow_warning.severity == severity


def test_ops_without_a_user_line_go_to_the_module_class(root: Path) -> None:
    orphan = refused("aten.sort.default", None, "nope")
    methods = {"forward": report(root, not_delegated=[orphan])}
    model = result_diagnostics(ok_result(root, **methods), root, None, "warning")[
        root / "models/refused.py"
    ]
    warnings = [d for d in at(model, mark(root, "module").line) if d.code == "not-delegated"]
    assert len(warnings) == 1 and "aten.sort.default" in warnings[0].message


def test_ranges_skip_indentation_and_count_utf16(root: Path) -> None:
    line = mark(root, "pow")
    text = read_lines_from_disk(line.path)[line.line - 1]
    assert line_range(line, read_lines_from_disk) == types.Range(
        types.Position(line.line - 1, 8), types.Position(line.line - 1, len(text))
    )
    emoji = Site(Path("x.py"), 1)
    wide = line_range(emoji, lambda _: ["  s = '🙂'"])
    assert (wide.start.character, wide.end.character) == (2, 10)  # the emoji is 2 UTF-16 units
    past_the_end = line_range(Site(Path("x.py"), 5), lambda _: ["a"])
    assert past_the_end == types.Range(types.Position(4, 0), types.Position(5, 0))


# Diagnostics of a failed build -----------------------------------------------------------------


def test_error_at_its_own_location_with_kind_as_code(root: Path) -> None:
    pow_line = mark(root, "pow").line
    found = result_diagnostics(
        error_result("export-error", "models/refused.py", pow_line), root, None, "warning"
    )
    [error] = found[root / "models/refused.py"]
    assert error.range.start.line == pow_line - 1
    assert error.severity == types.DiagnosticSeverity.Error
    assert error.code == "export-error"
    assert error.message == "refused: it broke"


def test_worker_crash_without_location_goes_to_the_entry_function(root: Path) -> None:
    config = load_config(root / "pyproject.toml")
    entry = entry_site(config, config.targets["refused"])
    assert entry == mark(root, "entry")
    for kind in ("worker-crash", "worker-timeout"):
        found = result_diagnostics(error_result(kind, None, None), root, entry, "warning")
        [error] = found[entry.path]
        assert (error.code, error.range.start.line) == (kind, entry.line - 1)


def test_a_cancelled_build_shows_nothing(root: Path) -> None:
    cancelled = error_result("cancelled", None, None)
    assert result_diagnostics(cancelled, root, mark(root, "entry"), "hint") == {}


def test_config_error_at_its_pyproject_line(root: Path) -> None:
    config = root / "pyproject.toml"
    error = {"kind": "config-error", "message": "unknown key", "file": str(config), "line": 2}
    [diagnostic] = config_error_diagnostics(error, config)[config]
    assert (diagnostic.code, diagnostic.range.start.line) == ("config-error", 1)
    no_line = {"kind": "config-error", "message": "no [tool.lowerd]", "file": None, "line": None}
    [first_line] = config_error_diagnostics(no_line, config)[config]
    assert first_line.range.start.line == 0


def test_merge_keeps_every_targets_diagnostics(root: Path) -> None:
    one = result_diagnostics(ok_result(root), root, None, "warning")
    other = result_diagnostics({**ok_result(root), "name": "again"}, root, None, "warning")
    merged = merge(one, other)
    path = root / "models/refused.py"
    assert len(merged[path]) == len(one[path]) + len(other[path])


# Entry sites found without importing ------------------------------------------------------------


def test_entry_site_of_a_module_entry_and_of_a_missing_function(root: Path) -> None:
    config = load_config(root / "pyproject.toml")
    assert entry_site(config, config.targets["pkg"]) == mark(root, "pkg")
    assert entry_site(config, config.targets["gone"]) == mark(root, "entry.gone")


def test_entry_site_of_a_file_with_a_syntax_error_is_the_config_line(root: Path) -> None:
    (root / "models" / "refused.py").write_text("def make(:\n")
    config = load_config(root / "pyproject.toml")
    assert entry_site(config, config.targets["refused"]) == mark(root, "entry.refused")


# Code lens and hover ----------------------------------------------------------------------------


def test_lens_titles(root: Path) -> None:
    assert lens_title(None, building=True) == "lowerd: building…"
    assert lens_title(None, building=False) == "lowerd: not built yet"
    ok = lens_title(ok_result(root), building=False)
    assert ok == "lowerd: forward: 2 of 5 ops on XNNPACK in 2 partitions (40 %)"
    failed = lens_title(error_result("export-error", None, None), building=True)
    assert failed == "lowerd: build failed (export-error) (building…)"


def test_hover_lists_each_op_with_backend_partition_and_cache(root: Path) -> None:
    results = {"refused": ok_result(root)}
    linear = hover_markdown(results, root, mark(root, "linear2"))
    assert linear is not None
    assert "`aten.linear.default`: XNNPACK partition 2 of 2, cache miss" in linear
    assert "refused" in linear and "forward" in linear
    cumsum = hover_markdown(results, root, mark(root, "cumsum"))
    assert cumsum is not None
    assert "`aten.cumsum.default`: **not delegated**: no XNNPACK support" in cumsum
    assert "×2" in cumsum
    assert hover_markdown(results, root, mark(root, "fc1")) is None


def test_hover_before_preprocess_says_so(root: Path) -> None:
    early = report(root, final=False)
    for partition in early["partitions"]:
        partition["cache"] = None
    text = hover_markdown({"refused": ok_result(root, forward=early)}, root, mark(root, "linear1"))
    assert text is not None and "not preprocessed yet" in text


# Settings ----------------------------------------------------------------------------------------


def test_settings_from_the_lowerd_section_with_bad_values_named_and_ignored() -> None:
    settings, problems = Settings().updated(
        {
            "lowerd": {
                "notDelegatedSeverity": "Hint",
                "workerTimeout": 30,
                "workerMemoryLimit": 2048,
                "workers": 0,
            }
        }
    )
    assert settings.not_delegated_severity == "hint"
    assert settings.timeout(config_timeout=600.0) == 30.0
    assert settings.memory_limit == 2048 * 2**20
    assert settings.workers is None
    assert len(problems) == 1 and "workers" in problems[0]
    # The section itself works too, and null goes back to the default.
    again, problems = settings.updated({"workerTimeout": None, "notDelegatedSeverity": "loud"})
    assert again.timeout(config_timeout=None) == DEFAULT_TIMEOUT
    assert again.not_delegated_severity == "hint" and "notDelegatedSeverity" in problems[0]


def test_a_backends_setting_overrides_every_target(root: Path) -> None:
    settings, problems = Settings().updated({"lowerd": {"backends": ["vulkan", "xnnpack"]}})
    assert problems == [] and settings.backends == ("vulkan", "xnnpack")
    config = load_config(root / "pyproject.toml").with_backends(settings.backends)
    assert {t.backends for t in config.targets.values()} == {("vulkan", "xnnpack")}

    kept, problems = settings.updated({"backends": ["tpu"]})
    assert kept.backends == ("vulkan", "xnnpack")
    assert problems and "unknown backend 'tpu'" in problems[0] and "xnnpack" in problems[0]
    assert settings.updated({"backends": None})[0].backends is None
