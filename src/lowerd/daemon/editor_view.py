"""What the editor shows of a project session: the result shown per target, the diagnostics
published per file, code lenses, hovers and the payloads of lowerd's own notifications.

It builds LSP payloads and remembers what was published; the server sends them. What each
result puts where (messages, ranges, lens titles) is daemon/diagnostics.py's. Results are
TargetResults here; they become JSON in the payloads, and nowhere before.

Besides LSP, the server sends two notifications an editor may show or ignore (tests await them),
lowerd/buildStarted and lowerd/buildFinished, and answers lowerd's own commands: their arguments
and answers are daemon/commands.py's classes.

Code actions on lowerd's diagnostics run the clients' own commands lowerd.showInReport [target,
uri, line], lowerd.compareBackends, lowerd.explainRebuild and lowerd.copyStockScript [target],
which ask the server's and show (or copy) the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from lowerd.daemon.baseline_diagnostics import baseline_diagnostics
from lowerd.daemon.commands import (
    BuildAnswer,
    PageAnswer,
    ReportAnswer,
    ScriptAnswer,
    UnbuiltTarget,
)
from lowerd.daemon.diagnostics import (
    SOURCE,
    FileDiagnostics,
    LineReader,
    build_warning_diagnostics,
    config_error_diagnostics,
    hover_markdown,
    lens_title,
    line_hints,
    line_range,
    merge,
    remote_cache_diagnostics,
    result_diagnostics,
    site_of,
    utf16_length,
)
from lowerd.daemon.session import ProjectSession, same_file
from lowerd.daemon.verify_diagnostics import (
    latency_title,
    verification_diagnostics,
    verification_hover,
)
from lowerd.project.report_model import MethodReport
from lowerd.project.report_page import TargetPage, render_page
from lowerd.project.reproducer import stock_script
from lowerd.project.result import TargetResult
from lowerd.worker.entry_site import Site, entry_site

BUILD = "lowerd.build"
STOCK_SCRIPT = "lowerd.stockScript"
REPORT_PAGE = "lowerd.reportPage"
# The clients' commands behind the code actions (they call the server's and show the answer).
SHOW_IN_REPORT = "lowerd.showInReport"
COMPARE_BACKENDS = "lowerd.compareBackends"
EXPLAIN_REBUILD = "lowerd.explainRebuild"
COPY_STOCK_SCRIPT = "lowerd.copyStockScript"
BUILD_ALL = "lowerd.buildAll"
REPORT = "lowerd.report"
BUILD_STARTED = "lowerd/buildStarted"
BUILD_WRITTEN = "lowerd/buildWritten"  # a verifying build's result, before its verification
BUILD_FINISHED = "lowerd/buildFinished"
NO_PROJECT = "no lowerd project is loaded"


class EditorView:
    def __init__(self, session: ProjectSession, read_lines: LineReader):
        self.session = session
        self.read_lines = read_lines  # the editor's text of an open file, else the disk's
        # Per target: its last result, or during a build its partitioned reports laid over the
        # last result.
        self.shown: dict[str, TargetResult] = {}
        self.published: dict[str, list[types.Diagnostic]] = {}
        # Pull diagnostics: per file, the result id last answered and the diagnostics it names.
        self.result_ids: dict[str, tuple[str, list[types.Diagnostic]]] = {}
        self.result_count = 0

    # What is shown ---------------------------------------------------------------------------

    def show_result(self, target: str, result: TargetResult) -> None:
        self.shown[target] = result

    def show_partitioned(self, target: str, method: str, report: MethodReport) -> None:
        """A method's coverage as soon as it is partitioned, before preprocess and emission;
        the other methods keep the last good build's reports."""
        last = self.shown.get(target)
        self.shown[target] = TargetResult.partitioned(target, method, report, last)

    def forget_removed_targets(self) -> None:
        """What a reloaded config no longer declares is shown no more."""
        config = self.session.config
        targets = config.targets if config else {}
        self.shown = {name: r for name, r in self.shown.items() if name in targets}

    # Diagnostics -----------------------------------------------------------------------------

    def diagnostics_to_publish(
        self, force: Sequence[str] = ()
    ) -> list[types.PublishDiagnosticsParams]:
        """Every file's diagnostics that changed since the last call (or whose uri is forced),
        and an empty list for each file that had some and has none now, so that fixed problems
        disappear. Taken as published."""
        by_uri = self._diagnostics_by_uri()
        changed = [
            types.PublishDiagnosticsParams(uri=uri, diagnostics=by_uri.get(uri, []))
            for uri in sorted(set(by_uri) | set(self.published) | set(force))
            if uri in force or self.published.get(uri, []) != by_uri.get(uri, [])
        ]
        self.published = {uri: found for uri, found in by_uri.items() if found}
        return changed

    # Pull diagnostics ------------------------------------------------------------------------

    def document_diagnostics(
        self, uri: str, previous_result_id: str | None
    ) -> types.DocumentDiagnosticReport:
        """textDocument/diagnostic: the file's diagnostics, or `unchanged` when the client's
        result id is still the current one."""
        items = self._diagnostics_by_uri().get(uri, [])
        result_id = self._result_id(uri, items)
        if previous_result_id == result_id:
            return types.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        return types.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)

    def workspace_diagnostics(
        self, previous: Sequence[types.PreviousResultId]
    ) -> types.WorkspaceDiagnosticReport:
        """workspace/diagnostic: every file lowerd has diagnostics for, and an empty report for
        each the client knows of that has none now; `unchanged` where its result id holds."""
        by_uri = self._diagnostics_by_uri()
        known = {entry.uri: entry.value for entry in previous}
        reports: list[types.WorkspaceDocumentDiagnosticReport] = []
        for uri in sorted(set(by_uri) | set(known)):
            items = by_uri.get(uri, [])
            result_id = self._result_id(uri, items)
            if known.get(uri) == result_id:
                reports.append(
                    types.WorkspaceUnchangedDocumentDiagnosticReport(
                        uri=uri, result_id=result_id, version=None
                    )
                )
            else:
                reports.append(
                    types.WorkspaceFullDocumentDiagnosticReport(
                        uri=uri, items=items, result_id=result_id, version=None
                    )
                )
        return types.WorkspaceDiagnosticReport(items=reports)

    def _result_id(self, uri: str, items: list[types.Diagnostic]) -> str:
        """The id of the file's diagnostics: the same while they are the same, a new one (never
        used before) once a build changes them."""
        current = self.result_ids.get(uri)
        if current is not None and current[1] == items:
            return current[0]
        self.result_count += 1
        result_id = f"{self.result_count}"
        self.result_ids[uri] = (result_id, items)
        return result_id

    def _diagnostics_by_uri(self) -> dict[str, list[types.Diagnostic]]:
        return {from_fs_path(str(path)): found for path, found in self._diagnostics().items()}

    def _diagnostics(self) -> FileDiagnostics:
        """A config error alone while there is one, else each shown target's results."""
        session = self.session
        if session.config_error is not None:
            if session.config_error.file is None or session.config_path is None:
                return {}
            return config_error_diagnostics(
                session.config_error, session.config_path, self.read_lines
            )
        if session.config is None:
            return {}
        parts = []
        severity = session.settings.not_delegated_severity
        for name, result in self.shown.items():
            target = session.config.targets.get(name)
            if target is not None:
                entry = entry_site(session.config, target)
                parts.append(
                    result_diagnostics(
                        result, session.config.root, entry, severity, self.read_lines
                    )
                )
                root = session.config.root
                parts.append(verification_diagnostics(result, root, entry, self.read_lines))
        parts.append(baseline_diagnostics(self.shown, session.config, self.read_lines))
        line = session.config.remote_cache.line
        parts.append(
            remote_cache_diagnostics(
                self.shown.values(), session.config.path, line, self.read_lines
            )
        )
        parts.append(
            build_warning_diagnostics(self.shown.values(), session.config, self.read_lines)
        )
        return merge(*parts)

    # Code lens and hover ---------------------------------------------------------------------

    def code_lenses(self, uri: str) -> list[types.CodeLens]:
        """Above each entry function of the file: the last complete build's summary (the report
        command) and a build command."""
        config = self.session.config
        if config is None or not self.session.started:
            return []
        path = Path(to_fs_path(uri) or "")
        lenses = []
        for name, target in config.targets.items():
            result = self.session.last_result(name)
            site = site_of(result.entry if result is not None else None, config.root)
            site = site or entry_site(config, target)
            if not same_file(site.path, path):
                continue
            where = line_range(site, self.read_lines)
            title = lens_title(result, self.session.building(name))
            if latency := latency_title(result):
                title += f" · {latency}"
            if len(config.targets) > 1:
                title = title.replace("lowerd: ", f"lowerd {name}: ", 1)
            lenses.append(_lens(where, title, REPORT, name))
            lenses.append(_lens(where, "Build .pte", BUILD, name))
        return lenses

    def hover(self, uri: str, line: int) -> types.Hover | None:
        """What became of each op made at the line (0-based), in every shown result."""
        config = self.session.config
        if config is None:
            return None
        site = Site(Path(to_fs_path(uri) or ""), line + 1)
        found = [hover_markdown(self.shown, config.root, site)]
        found.append(verification_hover(self.shown, config.root, site))
        text = "\n\n---\n\n".join(part for part in found if part) or None
        if text is None:
            return None
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
            range=line_range(site, self.read_lines),
        )

    def inlay_hints(self, uri: str, shown_range: types.Range) -> list[types.InlayHint]:
        """At the end of each line of the range that made ops: where they ran."""
        config = self.session.config
        if config is None or not self.session.settings.inlay_hints:
            return []
        path = Path(to_fs_path(uri) or "")
        lines = self.read_lines(path)
        first, last = shown_range.start.line + 1, shown_range.end.line + 1
        return [
            types.InlayHint(
                position=types.Position(hint.line - 1, utf16_length(lines[hint.line - 1].rstrip())),
                label=hint.label,
                tooltip=types.MarkupContent(kind=types.MarkupKind.Markdown, value=hint.tooltip),
                padding_left=True,
            )
            for hint in line_hints(self.shown, config.root, path)
            if first <= hint.line <= min(last, len(lines))
        ]

    # Code actions ----------------------------------------------------------------------------

    def code_actions(self, uri: str, where: types.Range) -> list[types.CodeAction]:
        """On lowerd's diagnostics: per target they name, show the op in the report, compare the
        backends, explain the last rebuild, copy a stock script that reproduces the target. The
        commands are the clients' own (they show or copy what the server's commands answer).

        The diagnostics are the server's own at the range, not the request's context: the
        client's copy can be empty for a moment (vscode-languageclient 9 stores an empty list
        for a pull a refresh cancelled, then pulls again), and Ctrl+. then found no action."""
        by_target: dict[str, list[types.Diagnostic]] = {}
        for diagnostic in self._diagnostics_by_uri().get(uri, []):
            data = diagnostic.data
            if (
                diagnostic.source == SOURCE
                and isinstance(data, dict)
                and data.get("target")
                and _overlaps(diagnostic.range, where)
            ):
                by_target.setdefault(str(data["target"]), []).append(diagnostic)
        actions = []
        for target, about in by_target.items():
            line = about[0].range.start.line + 1
            for title, command, arguments in (
                (f"Show in report ({target})", SHOW_IN_REPORT, [target, uri, line]),
                (f"Compare backends for {target}", COMPARE_BACKENDS, [target]),
                (f"Explain this rebuild of {target}", EXPLAIN_REBUILD, [target]),
                (f"Copy a stock ExecuTorch script for {target}", COPY_STOCK_SCRIPT, [target]),
            ):
                actions.append(
                    types.CodeAction(
                        title=f"lowerd: {title}",
                        kind=types.CodeActionKind.Empty,
                        diagnostics=about,
                        command=types.Command(title=title, command=command, arguments=arguments),
                    )
                )
        return actions

    def stock_script_answer(self, names: Sequence[str]) -> ScriptAnswer:
        """lowerd.stockScript: the stock ExecuTorch script that reproduces the target."""
        config = self.session.config
        if config is None:
            return ScriptAnswer(error=NO_PROJECT)
        if len(names) != 1 or names[0] not in config.targets:
            return ScriptAnswer(error=f"expected one target of {', '.join(config.targets)}")
        target = config.targets[names[0]]
        return ScriptAnswer(target.name, stock_script(config, target))

    def report_page_answer(self, names: Sequence[str]) -> PageAnswer:
        """lowerd.reportPage: the last builds' report as `lowerd report --html` writes it (the
        op graphs drawn), for the editor's graph view."""
        config = self.session.config
        if config is None:
            return PageAnswer(error=NO_PROJECT)
        unknown = [name for name in names if name not in config.targets]
        if unknown:
            return PageAnswer(error=f"unknown targets: {', '.join(unknown)}")
        pages = [TargetPage(n, self.session.last_result(n)) for n in names or config.targets]
        return PageAnswer(render_page(config.root.name, config.root, pages))

    # Command answers -------------------------------------------------------------------------

    async def build_answer(self, names: Sequence[str]) -> BuildAnswer | ReportAnswer:
        """lowerd.build: builds the targets now (a recorded build still up to date is reused)
        and answers their results as `lowerd build --json` would."""
        session, config = self.session, self.session.config
        if config is None or not session.started:
            return self.report_answer(names)
        unknown = [n for n in names if n not in config.targets]
        if unknown:
            return BuildAnswer(error=f"unknown targets: {', '.join(unknown)}")
        results = await session.build(names)
        return BuildAnswer(str(config.path), targets=tuple(results.get(n) for n in names))

    def report_answer(self, names: Sequence[str]) -> ReportAnswer:
        """lowerd.report: the last result of each target (all by default), and which are being
        rebuilt; the config error while there is no config."""
        session, config = self.session, self.session.config
        if config is None or not session.started:
            return ReportAnswer(None, session.config_error)
        names = list(names) or list(config.targets)
        return ReportAnswer(
            str(config.path),
            None,
            tuple(session.last_result(n) or UnbuiltTarget(n) for n in names),
            tuple(n for n in names if session.building(n)),
        )


def _overlaps(a: types.Range, b: types.Range) -> bool:
    """Whether two ranges share a position, ends included: a cursor (an empty range) at either
    end of a diagnostic is on it."""

    def at(position: types.Position) -> tuple[int, int]:
        return (position.line, position.character)

    return at(a.start) <= at(b.end) and at(b.start) <= at(a.end)


def _lens(where: types.Range, title: str, command: str, target: str) -> types.CodeLens:
    return types.CodeLens(
        range=where, command=types.Command(title=title, command=command, arguments=[target])
    )
