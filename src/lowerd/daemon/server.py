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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from lowerd.daemon.commands import BuildFinished, BuildStarted, BuildWritten
from lowerd.daemon.diagnostics import read_lines_from_disk
from lowerd.daemon.editor_view import (
    BUILD_FINISHED,
    BUILD_STARTED,
    BUILD_WRITTEN,
    EditorView,
)
from lowerd.daemon.lsp_protocol import GuardedLanguageServer
from lowerd.daemon.progress import BuildProgress
from lowerd.daemon.session import ProjectSession
from lowerd.daemon.settings import SECTION
from lowerd.project.result import TargetResult
from lowerd.project.version import LOWERD_VERSION
from lowerd.project.wire import encode
from lowerd.worker.protocol import BuiltEvent, PartitionedEvent, ProgressEvent, WorkerEvent


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
        elif isinstance(event, BuiltEvent):
            # The build's diagnostics now, while its program runs on the host runtime: the
            # verification's come with the result (build_finished), of the same sha256.
            self.view.show_result(target, event.result)
            self.publish()
            written = BuildWritten(target, build_id, event.result.sha256)
            self.protocol.notify(BUILD_WRITTEN, encode(written))
            self.refresh_code_lenses()

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
