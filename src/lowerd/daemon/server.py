"""`lowerd serve`: the language server that re-lowers on save and shows delegation in the editor.

The server process only reads configs, recorded build state and source text: user code, torch
and ExecuTorch run in the WorkerPool's processes. This module registers the LSP features and
glues three parts together:

- the ProjectSession (daemon/session.py): the config, the Scheduler, the file watcher and the
  private socket, through which `lowerd build` in a terminal shares this server's warm workers;
- the EditorView (daemon/editor_view.py): what is shown and published, as LSP payloads;
- BuildProgress (daemon/progress.py): each build's `$/progress` bar.

Lifecycle: `initialized` starts the session, which loads the config and builds every target;
saves and outside changes go to the session; each build's progress, early (partitioned) report
and result come back here as the session's listener and go to the view and the client.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from lowerd.daemon.commands import (
    BuildAnswer,
    BuildFinished,
    BuildStarted,
    PageAnswer,
    ReportAnswer,
    ScriptAnswer,
    target_names,
)
from lowerd.daemon.compare_service import COMPARE, compare_answer
from lowerd.daemon.diagnostics import SOURCE, read_lines_from_disk
from lowerd.daemon.editor_view import (
    BUILD,
    BUILD_ALL,
    BUILD_FINISHED,
    BUILD_STARTED,
    REPORT,
    REPORT_PAGE,
    STOCK_SCRIPT,
    EditorView,
)
from lowerd.daemon.lsp_protocol import GuardedLanguageServer
from lowerd.daemon.progress import BuildProgress
from lowerd.daemon.session import ProjectSession
from lowerd.daemon.settings import SECTION
from lowerd.project.explain import EXPLAIN, explain_answer
from lowerd.project.explain_document import ExplainAnswer
from lowerd.project.result import ErrorInfo, TargetResult
from lowerd.project.version import LOWERD_VERSION
from lowerd.project.wire import WireError, encode
from lowerd.worker.protocol import PartitionedEvent, ProgressEvent, WorkerEvent
from lowerd.worker.tasks import spawn


class LowerdServer(GuardedLanguageServer):  # answers every request (lsp_protocol.py)
    def __init__(self, workers: int = 2):
        super().__init__("lowerd", LOWERD_VERSION)
        self.session = ProjectSession(self, workers)
        self.view = EditorView(self.session, self.read_lines)
        self.progress_bars = BuildProgress(self.work_done_progress)

    # Lifecycle and settings ------------------------------------------------------------------

    def initialize(self, params: types.InitializeParams) -> None:
        self.apply_settings(params.initialization_options)
        root = self.workspace.root_path
        if root is None and params.workspace_folders:
            root = to_fs_path(params.workspace_folders[0].uri)
        self.session.root = Path(root or os.getcwd())

    def apply_settings(self, raw: Any) -> None:
        before = self.session.apply_settings(raw)
        severity = self.session.settings.not_delegated_severity
        if self.session.started and severity != before.not_delegated_severity:
            self.publish()  # a reload published already; then this one finds nothing new
        if self.session.started and self.session.settings.inlay_hints != before.inlay_hints:
            self.refresh_inlay_hints()

    async def pull_settings(self) -> None:
        workspace = self.client_capabilities.workspace
        if workspace and workspace.configuration:
            asked = types.ConfigurationParams([types.ConfigurationItem(section=SECTION)])
            [settings] = await self.workspace_configuration_async(asked)
            self.apply_settings(settings)

    # The session's listener ------------------------------------------------------------------

    def project_loaded(self) -> None:
        self.view.forget_removed_targets()
        self.publish()
        self.refresh_code_lenses()

    def build_started(self, target: str, build_id: int) -> None:
        self.protocol.notify(BUILD_STARTED, encode(BuildStarted(target, build_id)))
        if self._client_has_progress():
            self.progress_bars.started(target, build_id)
        self.refresh_code_lenses()

    def build_event(self, target: str, build_id: int, event: WorkerEvent) -> None:
        if isinstance(event, ProgressEvent):
            self.progress_bars.stage(build_id, event.stage, event.detail)
        elif isinstance(event, PartitionedEvent):
            self.view.show_partitioned(target, event.method, event.report)
            self.publish()

    def build_finished(
        self, target: str, build_id: int | None, result: TargetResult, current: bool
    ) -> None:
        error = result.error
        self.progress_bars.finished(build_id, error.kind if error is not None else "done")
        # A superseded build shows nothing: the newer build of the target will. A current one's
        # diagnostics go out before buildFinished, so that a client reacting to it finds them.
        if current:
            self.view.show_result(target, result)
            if error is not None and error.kind in ("worker-crash", "worker-timeout"):
                self.log_message(f"lowerd: {target}: {error.message}", error=True)
            self.publish()
        finished = BuildFinished.of(target, build_id, result, current)
        self.protocol.notify(BUILD_FINISHED, encode(finished))
        if current:
            self.refresh_code_lenses()

    def log_message(self, message: str, error: bool = False) -> None:
        kind = types.MessageType.Error if error else types.MessageType.Info
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    # Talking to the client -------------------------------------------------------------------

    def publish(self, force: Sequence[str] = ()) -> None:
        """Push what changed to a client that does not pull (Neovim 0.7); ask one that pulls
        to pull again."""
        changed = self.view.diagnostics_to_publish(force)
        if not self._client_pulls_diagnostics():
            for params in changed:
                self.text_document_publish_diagnostics(params)
        elif changed and self._client_refreshes_diagnostics():
            self.workspace_diagnostic_refresh(None)
        self.refresh_inlay_hints()  # they follow each result, as the diagnostics do

    def read_lines(self, path: Path) -> Sequence[str]:
        """The editor's text of an open file (what ranges apply to), else the file on disk."""
        document = self.workspace.text_documents.get(from_fs_path(str(path)))
        if document is not None:
            lines: list[str] = document.lines  # pygls leaves it untyped
            return lines
        return read_lines_from_disk(path)

    def refresh_code_lenses(self) -> None:
        workspace = self.client_capabilities.workspace
        lens = workspace.code_lens if workspace else None
        if lens is not None and lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    def refresh_inlay_hints(self) -> None:
        workspace = self.client_capabilities.workspace
        hints = workspace.inlay_hint if workspace else None
        if hints is not None and hints.refresh_support:
            self.workspace_inlay_hint_refresh(None)

    def _client_pulls_diagnostics(self) -> bool:
        document = self.client_capabilities.text_document
        return bool(document and document.diagnostic)

    def _client_refreshes_diagnostics(self) -> bool:
        workspace = self.client_capabilities.workspace
        return bool(workspace and workspace.diagnostics and workspace.diagnostics.refresh_support)

    def _client_has_progress(self) -> bool:
        window = self.client_capabilities.window
        return bool(window and window.work_done_progress)


def answer(value: object) -> dict[str, Any]:
    """A command's answer as the client gets it: JSON of the answer's class."""
    document: dict[str, Any] = encode(value)
    return document


def create_server(workers: int = 2) -> LowerdServer:
    server = LowerdServer(workers)

    @server.feature(types.INITIALIZE)
    def initialize(ls: LowerdServer, params: types.InitializeParams) -> None:
        ls.initialize(params)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: LowerdServer, params: types.InitializedParams) -> None:
        await ls.session.start()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: LowerdServer, params: None) -> None:
        await ls.session.stop()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LowerdServer, params: types.DidOpenTextDocumentParams) -> None:
        path = to_fs_path(params.text_document.uri)
        if ls.session.started and path:  # some editors forget diagnostics of closed files
            ls.publish(force=[from_fs_path(path)])

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: LowerdServer, params: types.DidSaveTextDocumentParams) -> None:
        path = to_fs_path(params.text_document.uri)
        if path:
            ls.session.file_changed(Path(path))

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(
        ls: LowerdServer, params: types.DidChangeConfigurationParams
    ) -> None:
        # Pushed settings apply before the next message is handled (a save right after them
        # builds with them); a client that sends none wants to be asked.
        if params.settings:
            ls.apply_settings(params.settings)
        else:
            spawn(ls.pull_settings())

    @server.feature(
        types.TEXT_DOCUMENT_DIAGNOSTIC,
        types.DiagnosticOptions(
            identifier=SOURCE, inter_file_dependencies=True, workspace_diagnostics=True
        ),
    )
    def document_diagnostic(
        ls: LowerdServer, params: types.DocumentDiagnosticParams
    ) -> types.DocumentDiagnosticReport:
        uri = params.text_document.uri
        return ls.view.document_diagnostics(uri, params.previous_result_id)

    @server.feature(types.WORKSPACE_DIAGNOSTIC)
    def workspace_diagnostic(
        ls: LowerdServer, params: types.WorkspaceDiagnosticParams
    ) -> types.WorkspaceDiagnosticReport:
        return ls.view.workspace_diagnostics(params.previous_result_ids)

    @server.feature(types.TEXT_DOCUMENT_INLAY_HINT, types.InlayHintOptions(resolve_provider=False))
    def inlay_hint(ls: LowerdServer, params: types.InlayHintParams) -> list[types.InlayHint]:
        return ls.view.inlay_hints(params.text_document.uri, params.range)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.Empty]),
    )
    def code_action(ls: LowerdServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        return ls.view.code_actions(params.text_document.uri, params.context.diagnostics)

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: LowerdServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        return ls.view.code_lenses(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: LowerdServer, params: types.HoverParams) -> types.Hover | None:
        return ls.view.hover(params.text_document.uri, params.position.line)

    @server.command(BUILD)
    async def build(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        try:
            names = target_names(arguments)
        except WireError as error:
            return answer(BuildAnswer(error=str(error)))
        return answer(await ls.view.build_answer(names))

    @server.command(BUILD_ALL)
    async def build_all(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        config = ls.session.config
        return answer(await ls.view.build_answer(list(config.targets) if config else []))

    @server.command(REPORT_PAGE)
    def report_page(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        try:
            return answer(ls.view.report_page_answer(target_names(arguments)))
        except WireError as error:
            return answer(PageAnswer(error=str(error)))

    @server.command(STOCK_SCRIPT)
    def stock_script(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        try:
            return answer(ls.view.stock_script_answer(target_names(arguments)))
        except WireError as error:
            return answer(ScriptAnswer(error=str(error)))

    @server.command(REPORT)
    def report(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        try:
            return answer(ls.view.report_answer(target_names(arguments)))
        except WireError as error:
            return answer(ReportAnswer(None, ErrorInfo("invalid-arguments", str(error))))

    @server.command(EXPLAIN)  # "Explain this rebuild": what `lowerd explain --json` prints
    def explain(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        try:
            return answer(explain_answer(ls.session.config, target_names(arguments)))
        except WireError as error:
            return answer(ExplainAnswer(error=str(error)))

    @server.command(COMPARE)  # [target, backends?]: what `lowerd compare --json` prints
    async def compare(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        session = ls.session
        limit = session.settings.memory_limit
        return answer(await compare_answer(session.pool, session.config, arguments, limit))

    return server


def serve(tcp: tuple[str, int] | None = None, workers: int = 2) -> int:
    server = create_server(workers)
    if tcp is not None:
        server.start_tcp(*tcp)
        return 0
    stdin, stdout = _protocol_streams()
    server.start_io(stdin, stdout)
    return 0


def _protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """The client's pipes, kept for the protocol alone: fd 1 then points at stderr and fd 0 at
    /dev/null, so that nothing else (a library's print, a child process) can corrupt or steal
    LSP messages."""
    stdin = os.fdopen(os.dup(0), "rb")
    stdout = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stdin, stdout
