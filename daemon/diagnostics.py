"""What the editor shows for a build result: diagnostics per file, code lens titles, hover text.

Pure functions of the build result JSON (lowerd.lowering.build.TargetResult.to_json(), whose
files are relative to the project root) and of the source lines they point at. No LSP I/O and
no torch: the server decides when to publish, this module decides what.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lsprotocol import types

SOURCE = "lowerd"
NOT_DELEGATED = "not-delegated"
COVERAGE = "coverage"
CONFIG_ERROR = "config-error"
# Results the server drops instead of showing: the build they end was superseded by a newer one.
CANCELLED = "cancelled"
# Ends the messages of a report carried over from the last build while an edit lowers.
PROVISIONAL_NOTE = "; from the last build, updating"

Severity = Literal["warning", "information", "hint"]
SEVERITIES: dict[str, types.DiagnosticSeverity] = {
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}

# The lines of a file as the editor shows them: an open buffer's text, else the file on disk.
LineReader = Callable[[Path], Sequence[str]]
FileDiagnostics = dict[Path, list[types.Diagnostic]]

_CACHE_WORDS = {
    "hit": "cache hit",
    "rebased": "cache hit (rebased)",
    "miss": "cache miss",
    "uncached": "not cached",
    None: "not preprocessed yet",
}


@dataclass(frozen=True)
class Site:
    """A 1-based line in a file; the file is absolute."""

    path: Path
    line: int


def read_lines_from_disk(path: Path) -> Sequence[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def site_of(raw: Mapping[str, Any] | None, root: Path) -> Site | None:
    """A report's {"file", "line"}, its file relative to the root (or absolute), as a Site."""
    if not raw or raw.get("file") is None:
        return None
    return Site(root / raw["file"], raw.get("line") or 1)


# Diagnostics ---------------------------------------------------------------------------------


def result_diagnostics(
    result: Mapping[str, Any],
    root: Path,
    entry: Site | None,
    severity: Severity,
    lines: LineReader = read_lines_from_disk,
) -> FileDiagnostics:
    """Everything one target's build result puts in the editor, by file.

    `entry` is where the target's entry function is when the result does not say (a worker that
    crashed reports no location); an error without a location of its own is shown there.
    """
    target = result["name"]
    entry = site_of(result.get("entry"), root) or entry
    found: FileDiagnostics = {}
    if result.get("status") == "error" and result.get("error"):
        error = result["error"]
        site = site_of(error, root) or entry
        if site is not None and error.get("kind") != CANCELLED:
            _add(found, site, error_diagnostic(site, error, target, lines))
        return found
    modules = result.get("modules") or {}
    for method, report in (result.get("methods") or {}).items():
        # The last build's report shown while an edit lowers: said so on every line it puts up.
        note = PROVISIONAL_NOTE if report.get("provisional") else ""
        summary = coverage_summary(method, report) + note
        module = site_of(modules.get(method), root)
        if entry is not None:
            _add(found, entry, _coverage_diagnostic(entry, f"{target}: {summary}", target, lines))
        if module is not None and module != entry:
            _add(found, module, _coverage_diagnostic(module, summary, target, lines))
        for site, ops in _not_delegated_by_line(report, root, module or entry):
            label = target if len(result["methods"]) == 1 else f"{target}, {method}"
            diagnostic = _not_delegated_diagnostic(site, ops, target, label + note, severity, lines)
            _add(found, site, diagnostic)
    return found


def error_diagnostic(
    site: Site, error: Mapping[str, Any], target: str | None, lines: LineReader
) -> types.Diagnostic:
    """An error at its line: the error's kind is the code (export-error, worker-crash, ...)."""
    prefix = f"{target}: " if target else ""
    return types.Diagnostic(
        range=line_range(site, lines),
        message=prefix + error.get("message", "failed"),
        severity=types.DiagnosticSeverity.Error,
        source=SOURCE,
        code=error.get("kind") or "error",
        data={"target": target} if target else None,
    )


def config_error_diagnostics(
    error: Mapping[str, Any], config_path: Path, lines: LineReader = read_lines_from_disk
) -> FileDiagnostics:
    """A [tool.lowerd] mistake at its line of pyproject.toml (line 1 if it has none)."""
    path = Path(error["file"]) if error.get("file") else config_path
    site = Site(path, error.get("line") or 1)
    return {path: [error_diagnostic(site, {**error, "kind": CONFIG_ERROR}, None, lines)]}


def merge(*parts: FileDiagnostics) -> FileDiagnostics:
    merged: FileDiagnostics = {}
    for part in parts:
        for path, diagnostics in part.items():
            merged.setdefault(path, []).extend(diagnostics)
    return merged


def _add(found: FileDiagnostics, site: Site, diagnostic: types.Diagnostic) -> None:
    found.setdefault(site.path, []).append(diagnostic)


def _coverage_diagnostic(
    site: Site, message: str, target: str, lines: LineReader
) -> types.Diagnostic:
    return types.Diagnostic(
        range=line_range(site, lines),
        message=message,
        severity=types.DiagnosticSeverity.Information,
        source=SOURCE,
        code=COVERAGE,
        data={"target": target},
    )


def _not_delegated_by_line(
    report: Mapping[str, Any], root: Path, fallback: Site | None
) -> list[tuple[Site, list[Mapping[str, Any]]]]:
    """The method's refused ops grouped by source line, in line order. Ops without a line of
    the user's go to the method's module class (or the entry), so none goes unmentioned."""
    by_site: dict[Site, list[Mapping[str, Any]]] = {}
    for op in report.get("not_delegated") or []:
        site = site_of(op, root) if op.get("line") else fallback
        if site is not None:
            by_site.setdefault(site, []).append(op)
    return sorted(by_site.items(), key=lambda item: (str(item[0].path), item[0].line))


def _not_delegated_diagnostic(
    site: Site,
    ops: list[Mapping[str, Any]],
    target: str,
    label: str,
    severity: Severity,
    lines: LineReader,
) -> types.Diagnostic:
    counted = Counter((op["op"], op["reason"]) for op in ops)
    if len(counted) == 1:
        [((op, reason), count)] = counted.items()
        message = f"{_times(op, count)} not delegated: {reason} ({label})"
    else:
        listed = "\n".join(f"{_times(op, n)}: {reason}" for (op, reason), n in counted.items())
        message = f"{len(ops)} ops not delegated ({label}):\n{listed}"
    return types.Diagnostic(
        range=line_range(site, lines),
        message=message,
        severity=SEVERITIES.get(severity, types.DiagnosticSeverity.Warning),
        source=SOURCE,
        code=NOT_DELEGATED,
        data={"target": target, "ops": sorted({op["op"] for op in ops})},
    )


def _times(op: str, count: int) -> str:
    return op if count == 1 else f"{op} ×{count}"


def line_range(site: Site, lines: LineReader) -> types.Range:
    """The line's text without its indentation, in UTF-16 columns as LSP counts by default."""
    index = max(site.line - 1, 0)
    text = ""
    file_lines = lines(site.path)
    if index < len(file_lines):
        text = file_lines[index]
    start = len(text) - len(text.lstrip())
    if start == len(text):  # blank or past the end: mark the whole line
        return types.Range(types.Position(index, 0), types.Position(index + 1, 0))
    return types.Range(
        types.Position(index, _utf16_length(text[:start])),
        types.Position(index, _utf16_length(text.rstrip())),
    )


def _utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# Coverage text -------------------------------------------------------------------------------


def coverage_summary(method: str, report: Mapping[str, Any]) -> str:
    """ "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)"."""
    ops, delegated = report.get("ops", 0), report.get("ops_delegated", 0)
    percent = _percent(report.get("coverage", 0.0))
    backends = [
        (name, totals.get("ops", 0), totals.get("partitions", 0))
        for name, totals in (report.get("backends") or {}).items()
        if totals.get("ops")
    ]
    if len(backends) == 1:
        name, _, partitions = backends[0]
        where = f"on {name} in {_plural(partitions, 'partition')}"
        return f"{method}: {delegated} of {ops} ops {where} ({percent} %)"
    if not backends:
        return f"{method}: 0 of {ops} ops delegated (0 %)"
    each = ", ".join(f"{n} on {name} in {_plural(p, 'partition')}" for name, n, p in backends)
    return f"{method}: {delegated} of {ops} ops delegated ({each}; {percent} %)"


def _percent(coverage: float) -> int:
    # Rounded down: "100 %" must mean every op is delegated.
    return 100 if coverage >= 1 else math.floor(coverage * 100)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# Code lens -----------------------------------------------------------------------------------


def lens_title(result: Mapping[str, Any] | None, building: bool) -> str:
    """The summary shown above an entry function."""
    if result is None:
        return "lowerd: building…" if building else "lowerd: not built yet"
    suffix = " (building…)" if building else ""
    if result.get("status") == "error":
        kind = (result.get("error") or {}).get("kind", "error")
        return f"lowerd: build failed ({kind}){suffix}"
    methods = result.get("methods") or {}
    summaries = [coverage_summary(name, report) for name, report in methods.items()]
    return ("lowerd: " + " · ".join(summaries) if summaries else "lowerd: built") + suffix


# Hover ---------------------------------------------------------------------------------------


def hover_markdown(results: Mapping[str, Mapping[str, Any]], root: Path, site: Site) -> str | None:
    """Each op of the line, per target and method: delegated to which backend and partition with
    its cache outcome, or why it stays on the CPU. None when no op comes from the line."""
    sections = []
    for target, result in results.items():
        for method, report in (result.get("methods") or {}).items():
            items = _ops_at(report, root, site)
            if items:
                counted = Counter(items)
                body = "\n".join(f"- {_times(text, n)}" for text, n in counted.items())
                sections.append(f"**lowerd** · {target} · {method}\n\n{body}")
    return "\n\n---\n\n".join(sections) or None


def _ops_at(report: Mapping[str, Any], root: Path, site: Site) -> list[str]:
    items = []
    partitions = report.get("partitions") or []
    for index, partition in enumerate(partitions, start=1):
        where = f"{partition['backend']} partition {index} of {len(partitions)}"
        cache = _CACHE_WORDS.get(partition.get("cache"), str(partition.get("cache")))
        for file, line, op in partition.get("sources") or []:
            if line == site.line and root / file == site.path:
                items.append(f"`{op}`: {where}, {cache}")
    for op in report.get("not_delegated") or []:
        if op.get("line") == site.line and root / op["file"] == site.path:
            items.append(f"`{op['op']}`: **not delegated**: {op['reason']}")
    return items


def files_of(results: Iterable[Mapping[str, Any]], root: Path) -> set[Path]:
    """Every file a set of results points at (to know whose lenses and hovers to refresh)."""
    files = set()
    for result in results:
        for site in (result.get("entry"), *(result.get("modules") or {}).values()):
            if found := site_of(site, root):
                files.add(found.path)
    return files
