"""What the editor shows for a build result: diagnostics per file, code lens titles, hover text.

Pure functions of a build's TargetResult (project/result.py; its files are relative to the
project root), its MethodReports (project/report_model.py) and of the source lines they point
at. No LSP I/O and no torch: the server decides when to publish, this module decides what. The
coverage sentence, its percent and the fixes hint are the report's own (MethodReport.summary,
.coverage_percent, .fixes_hint: report_model.coverage_of): shown here, never computed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from lsprotocol import types
from pygls.uris import from_fs_path

from lowerd.cache.regular_file import read_regular_file
from lowerd.daemon.settings import Severity
from lowerd.project.config import ProjectConfig
from lowerd.project.disk_errors import key_line
from lowerd.project.module_paths import collapse_module_paths
from lowerd.project.report_model import Frame, MethodReport, NotDelegatedOp, RefusalGroup
from lowerd.project.result import ErrorInfo, TargetResult, remote_warnings
from lowerd.worker.entry_site import Site

SOURCE = "lowerd"
NOT_DELEGATED = "not-delegated"
COVERAGE = "coverage"
CONFIG_ERROR = "config-error"
REMOTE_CACHE = "remote-cache"
BUILD_WARNING = "build-warning"
# Results the server drops instead of showing: the build they end was superseded by a newer one.
CANCELLED = "cancelled"
# Ends the messages of a provisional report, shown while an edit lowers: the last build's, with
# the edited modules' refusals lowered alone in place of its own there (lowering/edited_region.py).
PROVISIONAL_NOTE = "; provisional, updating"
# A not-delegated warning lists this many causes (most costly first) and says how many more
# there are; the hover lists them all. Reasons are cut to MAX_REASON characters.
MAX_LISTED = 3
MAX_REASON = 120
# Library lines a warning links to (relatedInformation), most costly first.
MAX_RELATED = 10

SEVERITIES: dict[Severity, types.DiagnosticSeverity] = {
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}

# The lines of a file as the editor shows them: an open buffer's text, else the file on disk.
LineReader = Callable[[Path], Sequence[str]]
FileDiagnostics = dict[Path, list[types.Diagnostic]]

_CACHE_WORDS: dict[str | None, str] = {
    "hit": "cache hit",
    "rebased": "cache hit (rebased)",
    "miss": "cache miss",
    "uncached": "not cached",
    None: "not preprocessed yet",
}


def read_lines_from_disk(path: Path) -> Sequence[str]:
    """The lines of a regular file under the cap; none for anything else (a FIFO named by an
    editor's URI must not block the server, nor /dev/zero fill its memory)."""
    try:
        return read_regular_file(path).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return []


class Located(Protocol):
    """What a report places in a file: an op, a library frame, an error, a definition. The file
    is relative to the project root (or absolute)."""

    @property
    def file(self) -> str | None: ...

    @property
    def line(self) -> int | None: ...


def site_of(where: Located | None, root: Path) -> Site | None:
    """Where a report places something, as a Site (line 1 when it names no line)."""
    if where is None or where.file is None:
        return None
    return Site(root / where.file, where.line or 1)


# Diagnostics ---------------------------------------------------------------------------------


def result_diagnostics(
    result: TargetResult,
    root: Path,
    entry: Site | None,
    severity: Severity,
    lines: LineReader = read_lines_from_disk,
) -> FileDiagnostics:
    """Everything one target's build result puts in the editor, by file.

    `entry` is where the target's entry function is when the result does not say (a worker that
    crashed reports no location); an error without a location of its own is shown there.
    """
    target = result.name
    entry = site_of(result.entry, root) or entry
    lines = _read_once(lines)  # a library file many warnings link to is read once
    found: FileDiagnostics = {}
    if not result.ok and result.error is not None:
        error = result.error
        site = site_of(error, root) or entry
        if site is not None and error.kind != CANCELLED:
            _add(found, site, error_diagnostic(site, error, target, lines))
        return found
    for method, report in result.methods.items():
        # The last build's report shown while an edit lowers: said so on every line it puts up.
        note = PROVISIONAL_NOTE if report.provisional else ""
        summary = coverage_summary(method, report) + note
        module = site_of(result.modules.get(method), root)
        if entry is not None:
            # The build's details at the entry: how its edge generation ran, and why not by region.
            message = f"{target}: {summary}" + edge_generation_line(report)
            _add(found, entry, _coverage_diagnostic(entry, message, target, lines))
        if module is not None and module != entry:
            _add(found, module, _coverage_diagnostic(module, summary, target, lines))
        for site, ops in _not_delegated_by_line(report, root, module or entry):
            label = target if len(result.methods) == 1 else f"{target}, {method}"
            diagnostic = _not_delegated_diagnostic(
                site, ops, report, root, target, label + note, severity, lines
            )
            _add(found, site, diagnostic)
    for problem in result.runtime.problems if result.runtime else ():
        site = site_of(problem, root) or entry  # a load problem: the runtime refuses the .pte
        if site is not None:
            error = ErrorInfo(problem.kind, problem.message)
            _add(found, site, error_diagnostic(site, error, target, lines))
    return found


def _read_once(lines: LineReader) -> LineReader:
    read: dict[Path, Sequence[str]] = {}

    def reader(path: Path) -> Sequence[str]:
        if path not in read:
            read[path] = lines(path)
        return read[path]

    return reader


def error_diagnostic(
    site: Site, error: ErrorInfo, target: str | None, lines: LineReader
) -> types.Diagnostic:
    """An error at its line: the error's kind is the code (export-error, worker-crash, ...)."""
    prefix = f"{target}: " if target else ""
    return types.Diagnostic(
        range=line_range(site, lines),
        message=prefix + (error.message or "failed"),
        severity=types.DiagnosticSeverity.Error,
        source=SOURCE,
        code=error.kind or "error",
        data={"target": target} if target else None,
    )


def config_error_diagnostics(
    error: ErrorInfo, config_path: Path, lines: LineReader = read_lines_from_disk
) -> FileDiagnostics:
    """A [tool.lowerd] mistake at its line of pyproject.toml (line 1 if it has none)."""
    path = Path(error.file) if error.file else config_path
    site = Site(path, error.line or 1)
    return {path: [error_diagnostic(site, replace(error, kind=CONFIG_ERROR), None, lines)]}


def remote_cache_diagnostics(
    results: Iterable[TargetResult],
    config_path: Path,
    line: int | None,
    lines: LineReader = read_lines_from_disk,
) -> FileDiagnostics:
    """The remote cache's trouble in the shown builds, at cache_url's line of pyproject.toml
    (line 1 when $LOWERD_CACHE_URL named it): Information, since each build still worked."""
    information = types.DiagnosticSeverity.Information
    messages = remote_warnings(results)
    return _config_diagnostics(messages, config_path, line, information, REMOTE_CACHE, lines)


def build_warning_diagnostics(
    results: Iterable[TargetResult], config: ProjectConfig, lines: LineReader = read_lines_from_disk
) -> FileDiagnostics:
    """What a build that stands had to say (TargetResult.warnings: its build record the disk
    refused), once each, at out_dir's line of pyproject.toml (the table's when out_dir is not
    set), where the CLI's line points: a Warning, since the .pte is written and only the next
    build's shortcut is lost. The message drops the `pyproject.toml:N: ` the CLI's line starts
    with: the editor shows it at that line."""
    said = dict.fromkeys(warning for result in results for warning in result.warnings or ())
    if not said:
        return {}
    line = key_line(config, "out_dir")
    where = f"{config.path.name}:{line}: " if line else f"{config.path.name}: "
    messages = [warning.removeprefix(where) for warning in said]
    warning = types.DiagnosticSeverity.Warning
    return _config_diagnostics(messages, config.path, line, warning, BUILD_WARNING, lines)


def _config_diagnostics(
    messages: Sequence[str],
    config_path: Path,
    line: int | None,
    severity: types.DiagnosticSeverity,
    code: str,
    lines: LineReader,
) -> FileDiagnostics:
    """Messages about the project as a whole, at a line of pyproject.toml (1 when none)."""
    if not messages:
        return {}
    where = line_range(Site(config_path, line or 1), lines)
    return {
        config_path: [
            types.Diagnostic(range=where, message=m, severity=severity, source=SOURCE, code=code)
            for m in messages
        ]
    }


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
    report: MethodReport, root: Path, fallback: Site | None
) -> list[tuple[Site, list[NotDelegatedOp]]]:
    """The method's refused ops grouped by source line, in line order. Ops without a line of
    the user's go to the method's module class (or the entry), so none goes unmentioned."""
    by_site: dict[Site, list[NotDelegatedOp]] = {}
    for op in report.not_delegated:
        site = (site_of(op, root) if op.line else None) or fallback
        if site is not None:
            by_site.setdefault(site, []).append(op)
    return sorted(by_site.items(), key=lambda item: (str(item[0].path), item[0].line))


def _not_delegated_diagnostic(
    site: Site,
    ops: list[NotDelegatedOp],
    report: MethodReport,
    root: Path,
    target: str,
    label: str,
    severity: Severity,
    lines: LineReader,
) -> types.Diagnostic:
    """One warning per line: its causes, most costly first, the first MAX_LISTED of them; the
    library lines that made the ops as relatedInformation (a click opens them)."""
    causes = line_causes(ops, report.refusals)
    listed = _listed(causes)
    if len(listed) == 1:
        [(op, reason, count)] = listed
        message = f"{_times(op, count)} not delegated: {_short(reason)} ({label})"
    else:
        shown = listed if len(listed) <= MAX_LISTED + 1 else listed[:MAX_LISTED]
        text = [f"{_times(op, n)}: {_short(reason)}" for op, reason, n in shown]
        rest = listed[len(shown) :]
        if rest:
            text.append(f"… {len(rest)} more ({_plural(sum(n for *_, n in rest), 'op')})")
        message = f"{len(ops)} ops not delegated ({label}):\n" + "\n".join(text)
    related = [
        info for cause in causes if (info := cause.related_information(root, lines)) is not None
    ]
    return types.Diagnostic(
        range=line_range(site, lines),
        message=message,
        severity=SEVERITIES.get(severity, types.DiagnosticSeverity.Warning),
        source=SOURCE,
        code=NOT_DELEGATED,
        related_information=related[:MAX_RELATED] or None,
        data={"target": target, "ops": sorted({op.op for op in ops})},
    )


def _listed(causes: Sequence[LineCause]) -> list[tuple[str, str, int]]:
    """(op, reason, count) in the causes' order, causes differing only by library line merged:
    the message says what was refused and why; relatedInformation says where."""
    counts: dict[tuple[str, str], int] = {}
    for cause in causes:
        key = (cause.op, cause.reason)
        counts[key] = counts.get(key, 0) + cause.count
    return [(op, reason, count) for (op, reason), count in counts.items()]


def _short(reason: str) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1].rstrip() + "…"


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
        types.Position(index, utf16_length(text[:start])),
        types.Position(index, utf16_length(text.rstrip())),
    )


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# Refused ops by cause -------------------------------------------------------------------------


@dataclass
class LineCause:
    """The refused ops of one line that share a cause: those of one of the report's refusal
    groups (same op, reason and library line, repeated over modules), or, in a report without
    groups (one stored by an older lowerd), those with the same op, reason and library line."""

    op: str
    reason: str
    ops: list[NotDelegatedOp] = field(default_factory=list)
    group: RefusalGroup | None = None  # the report's group, if any

    @property
    def count(self) -> int:
        return len(self.ops)

    @property
    def library(self) -> Frame | None:
        """The library frame that made the ops: transformers' LlamaRMSNorm.forward line."""
        for op in self.ops:
            if op.library:
                return op.library
        return self.group.library if self.group is not None else None

    @property
    def module_class(self) -> str | None:
        for op in self.ops:
            if op.module_class:
                return _short_class(op.module_class)
        found = self.group.module_class if self.group is not None else None
        return _short_class(found) if found else None

    @property
    def modules(self) -> str | None:
        """The module paths of the line's ops collapsed (model.layers.{0..3}.input_layernorm);
        the group's own pattern when every op of the group is on this line."""
        group = self.group
        if group is not None and group.modules and group.count == self.count:
            return group.modules
        return collapse_module_paths([op.module_path for op in self.ops])

    @property
    def function(self) -> str | None:
        """`LlamaRMSNorm.forward`: the library function, qualified by the module's class when it
        is that module's forward."""
        function = self.library.function if self.library is not None else None
        if function == "forward" and self.module_class:
            return f"{self.module_class}.forward"
        return function

    def where(self) -> str:
        """ "in `LlamaRMSNorm.forward` of model.layers.{0..3}.input_layernorm", as far as known."""
        parts = []
        if self.function:
            parts.append(f"in {self.function}")
        if self.modules:
            parts.append(("of " if parts else "in ") + self.modules)
        elif self.module_class and not self.function:
            parts.append(f"in {self.module_class}")
        return " ".join(parts)

    def related_information(
        self, root: Path, lines: LineReader
    ) -> types.DiagnosticRelatedInformation | None:
        site = site_of(self.library, root)
        if site is None:
            return None
        where = self.where()
        location = types.Location(uri=from_fs_path(str(site.path)), range=line_range(site, lines))
        message = _times(self.op, self.count) + (f" {where}" if where else "")
        return types.DiagnosticRelatedInformation(location=location, message=message)


def line_causes(ops: Sequence[NotDelegatedOp], refusals: Sequence[RefusalGroup]) -> list[LineCause]:
    """The causes of a line's refused ops, most costly first: in the order of the report's
    refusal groups (ranked by the lowering), then any ops no group names, most first."""
    group_of: dict[str, int] = {}
    for index, group in enumerate(refusals):
        for node in group.nodes:
            group_of.setdefault(node, index)
    grouped: dict[int, LineCause] = {}
    ungrouped: dict[tuple[str, str, str | None, int | None], LineCause] = {}
    for op in ops:
        index = group_of.get(op.node, -1)
        if index >= 0:
            new = LineCause(op.op, op.reason, [], refusals[index])
            cause = grouped.setdefault(index, new)
        else:
            key = (op.op, op.reason, *_frame_key(op.library))
            cause = ungrouped.setdefault(key, LineCause(op.op, op.reason))
        cause.ops.append(op)
    rest = sorted(ungrouped.values(), key=lambda c: (-_elements(c.ops), -c.count))
    return [grouped[index] for index in sorted(grouped)] + rest


def _frame_key(frame: Frame | None) -> tuple[str | None, int | None]:
    return (frame.file, frame.line) if frame is not None else (None, None)


def _elements(ops: Iterable[NotDelegatedOp]) -> int:
    return sum(op.elements or 0 for op in ops)


def _short_class(name: str) -> str:
    return name.rsplit(".", 1)[-1]


# Coverage text -------------------------------------------------------------------------------


# Inlay hints -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineHint:
    """Where a line's ops ran, for the end of the line: `→ XNNPACK #2`, `→ CPU`, or both."""

    line: int  # 1-based
    label: str
    tooltip: str  # markdown: each op of the line, where it went and why


def line_hints(results: Mapping[str, TargetResult], root: Path, path: Path) -> list[LineHint]:
    """The hints of one file, from every shown result: per line, each partition (numbered as
    the report numbers them) and the CPU, in the order the ops come; the tooltip says which op
    went where (and, when several targets or methods made ops here, whose), and why an op
    stayed on the CPU."""
    found: list[tuple[str, str, int, str, str]] = []  # target, method, line, place, note
    for target, result in results.items():
        for method, report in result.methods.items():
            count = len(report.partitions)
            for index, partition in enumerate(report.partitions, start=1):
                place = f"{partition.backend} #{index}"
                for file, line, op in partition.sources:
                    if root / file == path:
                        note = f"`{op}` → {partition.backend} partition {index} of {count}"
                        found.append((target, method, line, place, note))
            for refused in report.not_delegated:
                if refused.file is not None and refused.line and root / refused.file == path:
                    note = f"`{refused.op}` → CPU: {_short(refused.reason)}"
                    found.append((target, method, refused.line, "CPU", note))
    several = len({(target, method) for target, method, *_ in found}) > 1
    places: dict[int, dict[str, None]] = {}
    notes: dict[int, list[str]] = {}
    for target, method, line, place, note in found:
        places.setdefault(line, {})[place] = None
        notes.setdefault(line, []).append(f"{target}, {method}: {note}" if several else note)
    return [
        LineHint(line, "→ " + ", ".join(places[line]), "\n".join(_counted(notes[line])))
        for line in sorted(places)
    ]


def _counted(notes: list[str]) -> list[str]:
    return [f"- {_times(note, count)}" for note, count in Counter(notes).items()]


def coverage_summary(method: str, report: MethodReport) -> str:
    """ "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)": the report's summary."""
    return f"{method}: {report.summary}"


def edge_generation_line(report: MethodReport) -> str:
    """ "\nedge generation: stock (2 methods)"; "" when the report does not say."""
    generation = report.edge_generation
    return f"\nedge generation: {generation.words}" if generation is not None else ""


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# Code lens -----------------------------------------------------------------------------------


def lens_title(result: TargetResult | None, building: bool) -> str:
    """The summary shown above an entry function, with what fixing the costliest refusals
    would do to the partition count ("3 fixes would make this 1 partition": the report's own
    hint, none when no fix would merge partitions)."""
    if result is None:
        return "lowerd: building…" if building else "lowerd: not built yet"
    suffix = " (building…)" if building else ""
    if not result.ok:
        kind = result.error.kind if result.error is not None else "error"
        return f"lowerd: build failed ({kind}){suffix}"
    summaries = []
    for name, report in result.methods.items():
        hint = report.fixes_hint
        summaries.append(coverage_summary(name, report) + (f"; {hint}" if hint else ""))
    return ("lowerd: " + " · ".join(summaries) if summaries else "lowerd: built") + suffix


# Hover ---------------------------------------------------------------------------------------


def hover_markdown(results: Mapping[str, TargetResult], root: Path, site: Site) -> str | None:
    """Each op of the line, per target and method: delegated to which backend and partition with
    its cache outcome, or why it stays on the CPU, with the library line that made it and its
    module path. Ops without a line of the user's are shown where their warning is (the module
    class or the entry). None when no op comes from the line."""
    sections = []
    for target, result in results.items():
        for method, report in result.methods.items():
            fallback = site_of(result.modules.get(method), root) or site_of(result.entry, root)
            # What stays on the CPU first: it is what the reader came for.
            items = _refused_at(report, root, site, fallback) + _delegated_at(report, root, site)
            if items:
                sections.append(f"**lowerd** · {target} · {method}\n\n" + "\n".join(items))
    return "\n\n---\n\n".join(sections) or None


def _delegated_at(report: MethodReport, root: Path, site: Site) -> list[str]:
    items = []
    partitions = report.partitions
    for index, partition in enumerate(partitions, start=1):
        where = f"{partition.backend} partition {index} of {len(partitions)}"
        cache = _CACHE_WORDS.get(partition.cache, str(partition.cache))
        for file, line, op in partition.sources:
            if line == site.line and root / file == site.path:
                items.append(f"`{op}`: {where}, {cache}")
    return _counted(items)


def _refused_at(report: MethodReport, root: Path, site: Site, fallback: Site | None) -> list[str]:
    ops = [
        op
        for op in report.not_delegated
        if ((site_of(op, root) if op.line else None) or fallback) == site
    ]
    causes = line_causes(ops, report.refusals)
    return [_cause_markdown(cause, root) for cause in causes]


def _cause_markdown(cause: LineCause, root: Path) -> str:
    """A markdown list item: the op, count and reason, and a sub-item saying where it was made,
    e.g. in `LlamaRMSNorm.forward` at [modeling_llama.py:69](file:///…#L69) · the module paths."""
    text = "- " + _times(f"`{cause.op}`: **not delegated**: {cause.reason}", cause.count)
    details = []
    library = site_of(cause.library, root)
    if cause.function or library:
        where = f"in `{cause.function}`" if cause.function else "made"
        if library is not None:
            uri = from_fs_path(str(library.path))
            where += f" at [{library.path.name}:{library.line}]({uri}#L{library.line})"
        details.append(where)
    if cause.modules:
        named = cause.module_class and cause.module_class not in (cause.function or "")
        details.append(f"`{cause.modules}`" + (f" ({cause.module_class})" if named else ""))
    elif cause.module_class:
        details.append(f"`{cause.module_class}`")
    group = cause.group
    if group is not None and group.count > cause.count:
        details.append(f"{group.count} in the method")
    if details:
        text += "\n  - " + " · ".join(details)
    return text
