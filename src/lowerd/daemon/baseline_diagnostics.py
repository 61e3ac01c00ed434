"""The editor's side of `lowerd check`: a fact of a shown build that regressed past the committed
baseline (lowerd.baseline.toml, project/baseline.py) is a Warning at the target's entry. Only
complete builds are compared (a report still partitioning has no sizes yet). A baseline that
read_baseline refuses (a value of the wrong shape, `nan`) is that one Error at its line of the
baseline, as `lowerd check` says it; it costs the regression warnings only, never the builds'
own diagnostics. No torch."""

from __future__ import annotations

from collections.abc import Mapping

from lsprotocol import types

from lowerd.daemon.diagnostics import (
    SOURCE,
    FileDiagnostics,
    LineReader,
    config_error_diagnostics,
    line_range,
    read_lines_from_disk,
    site_of,
)
from lowerd.project.baseline import (
    BASELINE_FILE,
    Change,
    baseline_path,
    compare,
    facts_of,
    read_baseline,
    shown_fact,
)
from lowerd.project.config import ProjectConfig
from lowerd.project.errors import ConfigError
from lowerd.project.result import TargetResult
from lowerd.worker.entry_site import entry_site

BASELINE_REGRESSION = "baseline-regression"


def baseline_diagnostics(
    results: Mapping[str, TargetResult],
    config: ProjectConfig,
    lines: LineReader = read_lines_from_disk,
) -> FileDiagnostics:
    path = baseline_path(config.path)
    if not path.is_file():
        return {}
    try:
        baseline = read_baseline(path)
    except ConfigError as error:
        return config_error_diagnostics(error.info(), path, lines)
    complete = {
        name: facts_of(result)
        for name, result in results.items()
        if result.ok and result.sizes is not None and name in baseline
    }
    found: FileDiagnostics = {}
    for change in compare(baseline, complete):
        target = config.targets.get(change.target)
        if not change.regression or target is None:
            continue
        result = results[change.target]
        site = site_of(result.entry, config.root) or entry_site(config, target)
        diagnostic = types.Diagnostic(
            range=line_range(site, lines),
            message=regression_message(change),
            severity=types.DiagnosticSeverity.Warning,
            source=SOURCE,
            code=BASELINE_REGRESSION,
            data={"target": change.target},
        )
        found.setdefault(site.path, []).append(diagnostic)
    return found


def regression_message(change: Change) -> str:
    """ "cnn: coverage_percent regressed from 100 to 97 (lowerd.baseline.toml)"."""
    return (
        f"{change.target}: {change.fact} regressed from {shown_fact(change.baseline)} to "
        f"{shown_fact(change.now)} ({BASELINE_FILE}; `lowerd check --update` accepts it)"
    )
