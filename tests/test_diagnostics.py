"""The daemon's pure parts: a build's TargetResult -> what an editor shows (diagnostics, entry
sites), and the editor's settings.

The results are written in TargetResult's wire shape (files relative to the project root)
and read through project/wire.py's decode, as the editor gets them from a worker, over a small
project in tmp_path whose lines are found by their LINE-MARK comments.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from lowerd.cli.report_table import coverage_text
from lowerd.daemon.diagnostics import (
    MAX_LISTED,
    PROVISIONAL_NOTE,
    config_error_diagnostics,
    coverage_summary,
    hover_markdown,
    lens_title,
    line_range,
    merge,
    read_lines_from_disk,
    result_diagnostics,
)
from lowerd.daemon.settings import DEFAULT_TIMEOUT, Settings
from lowerd.project.config import load_config
from lowerd.project.module_paths import collapse_module_paths
from lowerd.project.report_model import MethodReport, coverage_of
from lowerd.project.result import ErrorInfo, TargetResult
from lowerd.project.wire import decode, encode
from lowerd.worker.entry_site import Site, entry_site

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
        for layer in self.layers:
            x = layer.norm(x)  # LINE-MARK: norm
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
    """A final MethodReport's JSON of MODEL: two XNNPACK partitions, pow and 2 cumsums refused;
    read back through MethodReport, with what it computes (summary, fixes_hint, ...)."""
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
    return encode(decode(MethodReport, {**base, **overrides}))


def partition(line: int, cache: str | None) -> dict[str, Any]:
    sources = [["models/refused.py", line, "aten.linear.default"]]
    return {"backend": "XNNPACK", "ops": 1, "cache": cache, "sources": sources}


def refused(op: str, line: int | None, reason: str) -> dict[str, Any]:
    file = "models/refused.py" if line else None
    return {"op": op, "file": file, "line": line, "reason": reason, "node": op.split(".")[1]}


def ok_result(root: Path, **methods: dict[str, Any]) -> TargetResult:
    """The refused target's result with these methods' report JSON (one forward by default)."""
    entry, module = mark(root, "entry"), mark(root, "module")
    return decode(
        TargetResult,
        {
            "name": "refused",
            "status": "ok",
            "methods": methods or {"forward": report(root)},
            "error": None,
            "entry": {"file": "models/refused.py", "line": entry.line},
            "modules": {"forward": {"file": "models/refused.py", "line": module.line, "name": "R"}},
        },
    )


def error_result(kind: str, file: str | None, line: int | None) -> TargetResult:
    return TargetResult.failed("refused", kind, "it broke", file, line)


def at(diagnostics: list[types.Diagnostic], line: int) -> list[types.Diagnostic]:
    return [d for d in diagnostics if d.range.start.line == line - 1]


# Coverage text -------------------------------------------------------------------------------


def summary_of(method: dict[str, Any]) -> str:
    return coverage_of(method["ops"], method["ops_delegated"], method["backends"]).summary


def test_coverage_summary_names_backend_partitions_and_percent_rounded_down() -> None:
    summary = {
        "ops": 271,
        "ops_delegated": 231,
        "backends": {"XNNPACK": {"ops": 231, "partitions": 42}},
    }
    assert summary_of(summary) == "231 of 271 ops on XNNPACK in 42 partitions (85 %)"
    method = MethodReport(0, 0, 0, 271, 231, 0.8524, summary["backends"])
    assert coverage_summary("forward", method) == (
        "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)"
    )
    almost = {**summary, "ops_delegated": 270}
    assert summary_of(almost).endswith("(99 %)")


def test_the_cli_and_the_editor_say_the_same_percent(root: Path) -> None:
    """One rounding rule and one sentence (project/report_model.py: coverage_of): 270 of 271 is
    99 %, in the editor's lens and in the CLI's report alike, never the 100 % that rounding
    would print."""
    method = report(
        root,
        ops=271,
        ops_delegated=270,
        coverage=round(270 / 271, 4),
        backends={"XNNPACK": {"ops": 270, "partitions": 2}},
    )
    assert method["coverage_percent"] == 99
    assert method["summary"] == "270 of 271 ops on XNNPACK in 2 partitions (99 %)"
    read = decode(MethodReport, method)
    assert coverage_summary("forward", read) == f"forward: {method['summary']}"
    assert coverage_text(method) == method["summary"]
    assert lens_title(ok_result(root, forward=method), building=False).startswith(
        "lowerd: forward: 270 of 271 ops on XNNPACK in 2 partitions (99 %)"
    )


def test_coverage_summary_with_one_partition_several_backends_and_none() -> None:
    xnnpack = {"XNNPACK": {"ops": 2, "partitions": 1}}
    one = {"ops": 2, "ops_delegated": 2, "backends": xnnpack}
    assert summary_of(one) == "2 of 2 ops on XNNPACK in 1 partition (100 %)"
    two = {
        "ops": 10,
        "ops_delegated": 9,
        "backends": {"XNNPACK": {"ops": 6, "partitions": 2}, "Vulkan": {"ops": 3, "partitions": 1}},
    }
    assert summary_of(two) == (
        "9 of 10 ops delegated (6 on XNNPACK in 2 partitions, 3 on Vulkan in 1 partition; 90 %)"
    )
    none = {"ops": 3, "ops_delegated": 0, "backends": {}}
    assert summary_of(none) == "0 of 3 ops delegated (0 %)"


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


# Refusal groups, library lines and module paths (issue 11) ---------------------------------------

# A library's file outside the project, as transformers' modeling_llama.py is in site-packages.
LIBRARY = """\
class LlamaRMSNorm(nn.Module):
    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)  # LINE-MARK: lib.mean
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)  # LINE-MARK: lib.add
        return self.weight * hidden_states
"""
MEAN_REASON = "only support mean over the last two dims of a 4D input, got dims [-1] of a 3D input"


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """modeling_llama.py in a site-packages folder outside the project."""
    folder = tmp_path / "venv" / "lib" / "site-packages" / "transformers"
    folder.mkdir(parents=True)
    (folder / "modeling_llama.py").write_text(LIBRARY)
    return folder / "modeling_llama.py"


def library_line(library: Path, name: str) -> int:
    [line] = [i for i, text in enumerate(LIBRARY.splitlines(), 1) if f"LINE-MARK: {name}" in text]
    return line


def norm_op(
    root: Path, library: Path, op: str, layer: int, node: str, reason: str, lib_mark: str
) -> dict[str, Any]:
    """A refused op of the norm line, made in LlamaRMSNorm.forward of layer `layer`."""
    return {
        **refused(op, mark(root, "norm").line, reason),
        "node": node,
        "library": {
            "file": str(library),
            "line": library_line(library, lib_mark),
            "function": "forward",
        },
        "module_path": f"model.layers.{layer}.input_layernorm",
        "module_class": "LlamaRMSNorm",
        "elements": 64,
    }


def norm_report(root: Path, library: Path, **overrides: Any) -> dict[str, Any]:
    """Four layers' RMSNorm on the norm line: a mean and an add refused in each, two groups;
    the add group ranked first (it splits partitions), although equal in count."""
    means = [
        norm_op(root, library, "aten.mean.dim", i, f"mean_{i}", MEAN_REASON, "lib.mean")
        for i in range(4)
    ]
    adds = [
        norm_op(root, library, "aten.add.Scalar", i, f"add_{i}", "no XNNPACK support", "lib.add")
        for i in range(4)
    ]
    groups = [group_of(adds, boundaries=3), group_of(means, boundaries=0)]
    return report(root, not_delegated=means + adds, refusals=groups, **overrides)


def group_of(ops: list[dict[str, Any]], boundaries: int) -> dict[str, Any]:
    first = ops[0]
    return {
        "op": first["op"],
        "reason": first["reason"],
        "count": len(ops),
        "file": first["file"],
        "line": first["line"],
        "library": first["library"],
        "nodes": [op["node"] for op in ops],
        "module_paths": [op["module_path"] for op in ops],
        "modules": collapse_module_paths(op["module_path"] for op in ops),
        "module_class": first["module_class"],
        "boundaries": boundaries,
        "elements": sum(op["elements"] for op in ops),
    }


def test_a_lines_warning_names_its_groups_most_costly_first(root: Path, library: Path) -> None:
    methods = {"forward": norm_report(root, library)}
    model = result_diagnostics(ok_result(root, **methods), root, None, "warning")
    [warning] = at(model[root / "models/refused.py"], mark(root, "norm").line)
    assert warning.message.splitlines() == [
        "8 ops not delegated (refused):",
        "aten.add.Scalar ×4: no XNNPACK support",
        f"aten.mean.dim ×4: {MEAN_REASON}",
    ]


def test_a_lines_warning_stays_short_with_many_causes(root: Path) -> None:
    """Twenty causes on one line, with long reasons: the top MAX_LISTED by the report's rank,
    each reason cut, and how many more; the hover has every one."""
    line = mark(root, "norm").line
    ops = [
        {**refused(f"aten.op{i}.default", line, f"reason {i} " + "why " * 80), "node": f"n{i}"}
        for i in range(20)
        for _ in range(i % 3 + 1)
    ]
    ranked = list(reversed(range(20)))  # the lowering's rank: op19 most costly
    groups = [
        {
            "op": f"aten.op{i}.default",
            "reason": ops[0]["reason"],
            "count": i % 3 + 1,
            "file": "models/refused.py",
            "line": line,
            "library": None,
            "nodes": [f"n{i}"],
        }
        for i in ranked
    ]
    methods = {"forward": report(root, not_delegated=ops, refusals=groups)}
    model = result_diagnostics(ok_result(root, **methods), root, None, "warning")
    [warning] = at(model[root / "models/refused.py"], line)
    text = warning.message.splitlines()
    assert text[0] == f"{len(ops)} ops not delegated (refused):"
    assert [entry.split(":")[0] for entry in text[1:-1]] == [
        "aten.op19.default ×2",
        "aten.op18.default",
        "aten.op17.default ×3",
    ][:MAX_LISTED]
    rest = len(ops) - 2 - 1 - 3
    assert text[-1] == f"… 17 more ({rest} ops)"
    assert len(warning.message) < 600 and all(entry.endswith("…") for entry in text[1:-1])
    hover = hover_markdown({"refused": ok_result(root, **methods)}, root, mark(root, "norm"))
    assert hover is not None and all(f"`aten.op{i}.default`" in hover for i in range(20))


def test_the_warning_links_the_library_lines_that_made_the_ops(root: Path, library: Path) -> None:
    methods = {"forward": norm_report(root, library)}
    model = result_diagnostics(ok_result(root, **methods), root, None, "warning")
    [warning] = at(model[root / "models/refused.py"], mark(root, "norm").line)
    related = warning.related_information
    assert related is not None and len(related) == 2
    add, mean = related
    assert add.location.uri == library.as_uri() == mean.location.uri
    assert add.location.range.start.line == library_line(library, "lib.add") - 1
    assert mean.location.range.start.line == library_line(library, "lib.mean") - 1
    assert add.location.range.start.character == 8  # the library line's text, indentation off
    assert add.message == (
        "aten.add.Scalar ×4 in LlamaRMSNorm.forward of model.layers.{0..3}.input_layernorm"
    )


def test_a_report_without_groups_is_grouped_by_op_reason_and_library_line(
    root: Path, library: Path
) -> None:
    """A report stored by an older lowerd (no refusals) or made before grouping: ops with the
    same op, reason and library line are one cause, the most numerous first."""
    one_add = norm_op(root, library, "aten.add.Scalar", 0, "add", "no XNNPACK support", "lib.add")
    means = [
        norm_op(root, library, "aten.mean.dim", i, f"m{i}", MEAN_REASON, "lib.mean")
        for i in (0, 1, 3)
    ]
    methods = {"forward": report(root, not_delegated=[one_add, *means])}
    model = result_diagnostics(ok_result(root, **methods), root, None, "warning")
    [warning] = at(model[root / "models/refused.py"], mark(root, "norm").line)
    assert warning.message.splitlines()[1:] == [
        f"aten.mean.dim ×3: {MEAN_REASON}",
        "aten.add.Scalar: no XNNPACK support",
    ]
    assert warning.related_information is not None
    assert [r.message for r in warning.related_information] == [
        "aten.mean.dim ×3 in LlamaRMSNorm.forward of model.layers.{0,1,3}.input_layernorm",
        "aten.add.Scalar in LlamaRMSNorm.forward of model.layers.0.input_layernorm",
    ]
    # Ops made at the user's own line link nowhere.
    plain = result_diagnostics(ok_result(root), root, None, "warning")
    [pow_warning] = at(plain[root / "models/refused.py"], mark(root, "pow").line)
    assert pow_warning.related_information is None


def test_the_hover_shows_the_library_line_and_the_module_paths(root: Path, library: Path) -> None:
    results = {"refused": ok_result(root, forward=norm_report(root, library))}
    hover = hover_markdown(results, root, mark(root, "norm"))
    assert hover is not None
    add_line = library_line(library, "lib.add")
    assert (
        "- `aten.add.Scalar`: **not delegated**: no XNNPACK support ×4\n"
        f"  - in `LlamaRMSNorm.forward` at [modeling_llama.py:{add_line}]"
        f"({library.as_uri()}#L{add_line})"
        " · `model.layers.{0..3}.input_layernorm`"
    ) in hover
    assert hover.index("aten.add.Scalar") < hover.index("aten.mean.dim")  # the report's rank
    # A module class the function does not name yet is said after the paths.
    other = encode(results["refused"])["methods"]["forward"]
    other["not_delegated"] = [
        {**op, "library": {**op["library"], "function": "rms_norm"}}
        for op in other["not_delegated"]
    ]
    hover = hover_markdown({"refused": ok_result(root, forward=other)}, root, mark(root, "norm"))
    assert hover is not None
    assert "in `rms_norm` at " in hover
    assert "`model.layers.{0..3}.input_layernorm` (LlamaRMSNorm)" in hover


def test_ops_without_a_user_line_are_in_the_hover_of_their_warnings_line(
    root: Path, library: Path
) -> None:
    """A transformers model has no frame of the user's: its ops warn at the module class line,
    and the hover there says where in the library they come from."""
    op = norm_op(root, library, "aten.mean.dim", 2, "m", MEAN_REASON, "lib.mean")
    orphan = {**op, "file": None, "line": None}
    results = {"refused": ok_result(root, forward=report(root, not_delegated=[orphan]))}
    hover = hover_markdown(results, root, mark(root, "module"))
    assert hover is not None and "`aten.mean.dim`: **not delegated**" in hover
    assert "`LlamaRMSNorm.forward`" in hover and "model.layers.2.input_layernorm" in hover


def test_the_lens_says_how_many_fixes_would_leave_how_many_partitions(
    root: Path, library: Path
) -> None:
    # From the lowering's own count: fixing the top 1, 2, 3, 4 groups.
    forty_two = {"XNNPACK": {"ops": 231, "partitions": 42}}

    def hint(backends: dict[str, Any], after: list[int]) -> str | None:
        return coverage_of(231, 231, backends, after).fixes_hint

    assert hint(forty_two, [30, 9, 1, 1]) == "3 fixes would make this 1 partition"
    assert hint(forty_two, [41, 41]) == "1 fix would make this 41 partitions"
    assert hint(forty_two, [42]) is None
    # A real Llama: the fewest take 34 fixes; the lens also says what the first five do.
    llama = [9, 8, 7, 6, 6, 5, 3, 3, 3, 5, 6, 6, 4, 4, 4, 4, 4, 3, 5, 8, 6, 4, 4, 5, 4, 3]
    llama += [4, 4, 3, 2, 2, 2, 2, 1, 1]
    thirteen = {"XNNPACK": {"ops": 130, "partitions": 13}}
    assert hint(thirteen, llama) == "4 fixes would make this 6 partitions, 34 would make 1"
    # The lens shows the report's hint, as the report made it.
    counted = report(root, backends=forty_two, partitions_if_fixed=[30, 9, 1, 1])
    assert counted["fixes_hint"] == "3 fixes would make this 1 partition"
    title = lens_title(ok_result(root, forward=counted), building=False)
    assert title.endswith("in 42 partitions (40 %); 3 fixes would make this 1 partition")
    # Estimated from the groups' boundaries: the norm report's add group splits 3 times.
    four = {"XNNPACK": {"ops": 2, "partitions": 4}}
    estimated = norm_report(root, library, backends=four)
    assert estimated["fixes_hint"] == "1 fix would make this 1 partition"
    title = lens_title(ok_result(root, forward=estimated), building=False)
    assert title.endswith("in 4 partitions (40 %); 1 fix would make this 1 partition")
    # A report without groups, and one partition, say nothing more.
    assert report(root)["fixes_hint"] is None
    one = report(root, backends={"XNNPACK": {"ops": 2, "partitions": 1}}, partitions_if_fixed=[1])
    assert one["fixes_hint"] is None
    assert lens_title(ok_result(root, forward=one), building=False).endswith("(40 %)")


def test_a_provisional_reports_moved_lines_keep_their_groups(root: Path, library: Path) -> None:
    """The last build's report shown during an edit has its ops' lines moved, not its groups':
    the warning follows the ops and still lists their groups."""
    moved = norm_report(root, library, provisional=True, final=False)
    pow_line = mark(root, "pow").line
    for op in moved["not_delegated"]:
        op["line"] = pow_line
    model = result_diagnostics(ok_result(root, forward=moved), root, None, "warning")
    [warning] = at(model[root / "models/refused.py"], pow_line)
    assert warning.message.splitlines()[1] == "aten.add.Scalar ×4: no XNNPACK support"
    assert PROVISIONAL_NOTE in warning.message.splitlines()[0]
    assert not at(model[root / "models/refused.py"], mark(root, "norm").line)


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
    error = ErrorInfo("config-error", "unknown key", str(config), 2)
    [diagnostic] = config_error_diagnostics(error, config)[config]
    assert (diagnostic.code, diagnostic.range.start.line) == ("config-error", 1)
    no_line = ErrorInfo("config-error", "no [tool.lowerd]")
    [first_line] = config_error_diagnostics(no_line, config)[config]
    assert first_line.range.start.line == 0


def test_merge_keeps_every_targets_diagnostics(root: Path) -> None:
    one = result_diagnostics(ok_result(root), root, None, "warning")
    again = ok_result(root)
    again.name = "again"
    other = result_diagnostics(again, root, None, "warning")
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


def test_a_remote_cache_that_was_down_is_information_at_cache_url(tmp_path: Path) -> None:
    """Fail open, loudly: every build worked, so not a warning; once, however many targets met
    it; gone with the next build that found the tier well."""
    from lowerd.cache.remote import RemoteCounts, RemoteReport
    from lowerd.daemon.diagnostics import REMOTE_CACHE, remote_cache_diagnostics
    from lowerd.project.result import CacheSummary

    config = tmp_path / "pyproject.toml"
    config.write_text('[tool.lowerd]\ncache_url = "redis://cache:6379/0"\n')
    down = RemoteReport(
        "unavailable: ConnectionError: Error 111 connecting to cache:6379. Connection refused.",
        RemoteCounts(errors=1),
        url="redis://cache:6379/0",
    )
    results = [
        TargetResult(name, "ok", 1.0, cache=CacheSummary(misses=1).with_remote(down))
        for name in ("a", "b")
    ]
    [diagnostic] = remote_cache_diagnostics(results, config, 2)[config]
    assert diagnostic.severity == types.DiagnosticSeverity.Information
    assert diagnostic.code == REMOTE_CACHE and diagnostic.range.start.line == 1
    assert diagnostic.message == (
        "remote cache redis://cache:6379/0 unavailable (ConnectionError: Error 111 connecting"
        " to cache:6379. Connection refused.); built with the local cache"
    )
    well = RemoteReport("ok", RemoteCounts(hits=1), url="redis://cache:6379/0")
    healed = [TargetResult("a", "ok", 1.0, cache=CacheSummary(hits=1).with_remote(well))]
    assert remote_cache_diagnostics(healed, config, 2) == {}
