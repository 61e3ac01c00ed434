"""`lowerd check`: a target's facts against the committed lowerd.baseline.toml. A coverage
regression fails the check with a table, `--update` accepts it, the editor warns at the target's
entry; each fact's band (a latency 1.5× the baseline's is noise, 2× is not)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from lsprotocol import types

from lowerd.cli import check_command
from lowerd.cli.main import main
from lowerd.daemon.baseline_diagnostics import BASELINE_REGRESSION, baseline_diagnostics
from lowerd.lowering.build import build_target
from lowerd.project.baseline import (
    BASELINE_FILE,
    Change,
    CheckDocument,
    compare,
    facts_of,
    read_baseline,
)
from lowerd.project.config import load_config
from lowerd.project.errors import ConfigError
from lowerd.project.result import TargetResult
from lowerd.project.verification import (
    Latency,
    MethodVerification,
    Tolerance,
    Verdict,
    Verification,
)
from lowerd.project.wire import decode
from lowerd.worker.entry_site import entry_site

from helpers import PROJECTS
from stock import forget_project_modules, importable_copy


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("baseline") / "runtime"
    with importable_copy(PROJECTS / "runtime", root):
        yield root


def build_host(project: Path) -> TargetResult:
    """`host` built and recorded, so that `lowerd check` answers from its record."""
    config = load_config(project / "pyproject.toml")
    result = build_target(config, config.targets["host"], None)
    assert result.ok, result.error
    return result


def check(project: Path, *args: str) -> int:
    return main(["check", "--config", str(project / "pyproject.toml"), "host", *args])


def test_check_fails_on_a_coverage_regression_and_passes_after_update(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = build_host(project)
    assert check(project) == 2  # no baseline yet
    assert "lowerd check --update" in capsys.readouterr().err
    assert check(project, "--update") == 0
    baseline = (project / "lowerd.baseline.toml").read_text()
    assert "[targets.host]\ncoverage_percent = 66\npartitions = 2\n" in baseline
    assert f"pte_bytes = {built.sizes.pte_bytes}\n" in baseline  # type: ignore[union-attr]
    assert check(project) == 0
    assert "0 regressions" in capsys.readouterr().out

    # x**3 after the cumsum: XNNPACK refuses pow 3, so 2 of 4 ops are delegated (50 %).
    model = project / "models" / "scan.py"
    cumsum = "x = torch.cumsum(x, dim=1)"
    model.write_text(model.read_text().replace(cumsum, f"{cumsum}\n        x = x**3"))
    earlier = model.stat().st_mtime - 2  # written well before the build starts: it is recorded
    os.utime(model, (earlier, earlier))
    forget_project_modules(project)  # a build imports it afresh, as a fresh worker does
    regressed = build_host(project)
    assert check(project) == 1
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["target", "fact", "baseline", "now"]
    assert ["host", "coverage_percent", "66", "50", "REGRESSION"] in [
        line.split() for line in table.splitlines()
    ]
    assert "regressions in 1 targets" in table
    assert check(project, "--json") == 1  # the same comparison, as a typed document
    document = decode(CheckDocument, json.loads(capsys.readouterr().out))
    assert not document.passed and document.targets == 1 and document.broken == ()
    assert document.baseline == str(project / "lowerd.baseline.toml")
    assert document.changes[0] == Change("host", "coverage_percent", 66, 50, regression=True)

    # The editor: a warning at the target's entry function.
    config = load_config(project / "pyproject.toml")
    found = baseline_diagnostics({"host": regressed}, config)
    entry = entry_site(config, config.targets["host"])
    [coverage] = [d for d in found[entry.path] if "coverage_percent" in d.message]
    assert coverage.severity == types.DiagnosticSeverity.Warning
    assert coverage.code == BASELINE_REGRESSION and coverage.range.start.line + 1 == entry.line
    assert "regressed from 66 to 50" in coverage.message

    assert check(project, "--update") == 0
    assert "coverage_percent = 50" in (project / "lowerd.baseline.toml").read_text()
    assert check(project) == 0
    assert baseline_diagnostics({"host": regressed}, config) == {}


def verified(max_abs: float, median_ms: float, verdict: Verdict = "pass") -> TargetResult:
    """A target's result with a verification of its forward (what `verify` adds)."""
    from lowerd.project.verification import InputCheck, OutputCheck

    output = OutputCheck(0, "float32", (2, 8), max_abs, max_abs)
    method = MethodVerification(
        verdict,
        Tolerance(1e-5, 1e-5, "float32 default"),
        (InputCheck("example", (output,)),),
        latency=Latency(5, 2, median_ms, median_ms, "this host"),
    )
    verification = Verification.of("executorch 1.5.1", "eager", {"forward": method}, 0.1, "0" * 64)
    return TargetResult("t", "ok", verification=verification)


def test_error_and_latency_regress_past_their_bands_only() -> None:
    baseline = {"t": facts_of(verified(1e-6, 2.0))}
    assert baseline["t"]["forward.max_abs_error"] == 1e-6
    assert baseline["t"]["forward.latency_ms"] == 2.0
    noise = facts_of(verified(1.5e-6, 2.9))  # within 2× + 1e-6 and 1.5× + 0.05 ms
    assert not any(change.regression for change in compare(baseline, {"t": noise}))
    worse = facts_of(verified(1e-3, 4.0))
    regressed = {c.fact for c in compare(baseline, {"t": worse}) if c.regression}
    assert regressed == {"forward.max_abs_error", "forward.latency_ms"}
    failing = facts_of(verified(1e-6, 2.0, verdict="fail"))
    [change] = compare(baseline, {"t": failing})
    assert (change.fact, change.baseline, change.now, change.regression) == (
        "forward.verified",
        1,
        0,
        True,
    )


# A baseline is untrusted input: each value that is no fact a build gives is refused at its line.

DIGITS_401 = "9" * 401  # past a float's range: float() raises OverflowError


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (
            f"[targets.t]\ncoverage_percent = 66\npte_bytes = {DIGITS_401}\n",
            3,
            "pte_bytes must be a finite number >= 0, got an integer of 401 digits",
        ),
        # NaN compares false: the gate would pass for ever.
        ("[targets.t]\ncoverage_percent = nan\n", 2, "got the float NaN"),
        ('[targets.t]\n"forward.max_abs_error" = inf\n', 2, "got the float Infinity"),
        ("[targets.t]\npartitions = -1\n", 2, "partitions must be a finite number >= 0"),
        ('[targets.t]\n"forward.verified" = true\n', 2, "got the boolean true"),
        ("[targets.t]\ncoverage_percent = 'high'\n", 2, 'got the string "high"'),
        ("[targets.t]\ncoverage_percent = [66]\n", 2, "got an array"),
        # A dotted key is a table where a number belongs; a method's fact is one quoted key.
        ("[targets.t]\nforward.latency_ms = 2.0\n", 2, "forward must be a finite number"),
        ("targets = 5\n", 1, "targets must be a table of [targets.NAME] tables, got the integer 5"),
        ("[[targets]]\ncoverage_percent = 66\n", 1, "got an array"),
        ("[targets]\nt = 5\n", 2, "[targets.t] must be a table of facts, got the integer 5"),
        (
            "[targets.t]\npartitions = 1\ncoverage_precent = 66\n",
            3,
            "unknown fact 'coverage_precent' (did you mean 'coverage_percent'?)",
        ),
        ("\ntarget = {}\n", 2, "unknown key 'target' in lowerd.baseline.toml"),
        (f"[targets.t]\npte_bytes = {'9' * 5000}\n", 2, "invalid TOML: an integer of more than"),
        ("[targets.t]\npartitions = \n", 2, "invalid TOML: "),
    ],
)
def test_a_baseline_value_no_build_gives_is_refused_at_its_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = tmp_path / BASELINE_FILE
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_baseline(path)
    assert (refused.value.location.file, refused.value.location.line) == (str(path), line)
    assert words in refused.value.message
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 400  # one line


def test_a_refused_baseline_is_one_line_of_check_before_any_build(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / BASELINE_FILE
    path.write_text(f"[targets.host]\npte_bytes = {DIGITS_401}\n")
    try:
        for update in ((), ("--update",)):
            assert check(project, *update) == 2
            said = f"lowerd: {path}:2: pte_bytes must be a finite number >= 0, got an integer of"
            err = capsys.readouterr().err
            assert err.startswith(said) and err.count("\n") == 1, err
    finally:
        path.unlink()


def test_a_folder_where_the_baseline_goes_is_one_line_naming_it(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / BASELINE_FILE
    path.mkdir()
    try:
        for update in ((), ("--update",)):
            assert check(project, *update) == 2
            said = f"lowerd: {path}: cannot read: a folder, not a regular file\n"
            assert capsys.readouterr().err == said
    finally:
        path.rmdir()
    # One that appears between the read and the write: the write's error, at the path.
    (tmp_path / BASELINE_FILE).mkdir()
    with pytest.raises(ConfigError) as refused:
        check_command._update(tmp_path / BASELINE_FILE, {}, {}, {})
    assert str(refused.value) == f"{tmp_path / BASELINE_FILE}: cannot write {BASELINE_FILE}: " + (
        "Is a directory"
    )


def test_the_editor_shows_a_refused_baseline_at_its_line(project: Path) -> None:
    """Its own Error at the value's line of the baseline, instead of its regression warnings
    (test_server.py: and every build's diagnostics stay)."""
    path = project / BASELINE_FILE
    path.write_text(f"[targets.host]\ncoverage_percent = 66\npartitions = {DIGITS_401}\n")
    try:
        found = baseline_diagnostics({}, load_config(project / "pyproject.toml"))
    finally:
        path.unlink()
    [error] = found[path]
    assert (error.severity, error.code) == (types.DiagnosticSeverity.Error, "config-error")
    assert error.range.start.line == 2 and "partitions must be a finite number" in error.message
