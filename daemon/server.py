"""`lowerd serve`: the language server that re-lowers on save and shows delegation in the editor.

The server process only reads configs, recorded build state and source text: user code, torch
and ExecuTorch run in the WorkerPool's processes. Lifecycle: `initialized` loads the config,
starts the workers and the file watcher and builds every target; saves and outside changes go to
the Scheduler; each build's progress, early (partitioned) report and result come back here and
are turned into diagnostics, code lenses and hovers.

Besides LSP, the server sends two notifications an editor may show or ignore (tests await them):
`lowerd/buildStarted` {target, buildId} and `lowerd/buildFinished` {target, buildId, status,
errorKind, reused, current}.

It also opens the project's private socket (daemon/rpc.py): `lowerd build` in a terminal then
builds through this server's warm workers instead of starting a daemon of its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.uris import from_fs_path, to_fs_path

from lowerd.daemon.build_service import BuildService
from lowerd.daemon.diagnostics import (
    FileDiagnostics,
    Site,
    config_error_diagnostics,
    hover_markdown,
    lens_title,
    line_range,
    merge,
    read_lines_from_disk,
    result_diagnostics,
    site_of,
)
from lowerd.daemon.entry_site import entry_site
from lowerd.daemon.lsp_protocol import GuardedLanguageServer
from lowerd.daemon.rpc import RpcServer
from lowerd.daemon.runtime import RuntimeDirError
from lowerd.daemon.scheduler import Scheduler
from lowerd.daemon.settings import SECTION, Settings
from lowerd.daemon.tasks import spawn
from lowerd.daemon.watcher import ProjectWatcher
from lowerd.daemon.workers import BuildRequest, WorkerPool
from lowerd.project.config import PYPROJECT, ProjectConfig, TargetConfig, find_config, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.version import LOWERD_VERSION

log = logging.getLogger(__name__)

BUILD = "lowerd.build"
BUILD_ALL = "lowerd.buildAll"
REPORT = "lowerd.report"
BUILD_STARTED = "lowerd/buildStarted"
BUILD_FINISHED = "lowerd/buildFinished"

# Where each stage puts a progress bar; preprocess fills its span as partitions are done.
_STAGE_PERCENT = {
    "load": 5,
    "export": 15,
    "partition": 35,
    "preprocess": 45,
    "emit": 90,
    "write": 95,
}
_PREPROCESS_SPAN = 40


class LowerdServer(GuardedLanguageServer):  # answers every request (lsp_protocol.py)
    def __init__(self, workers: int = 2):
        super().__init__("lowerd", LOWERD_VERSION)
        self.default_workers = workers
        self.settings = Settings()
        self.root = Path.cwd()
        self.config: ProjectConfig | None = None
        self.config_path: Path | None = None  # the file whose change reloads the config
        self.config_error: dict[str, Any] | None = None
        self.pool: WorkerPool | None = None
        self.scheduler: Scheduler | None = None
        self.watcher: ProjectWatcher | None = None
        # What the editor shows per target: the last result, or during a build its partitioned
        # reports laid over the last result.
        self.shown: dict[str, dict[str, Any]] = {}
        self.published: dict[str, list[types.Diagnostic]] = {}
        self.progress: dict[int, _BuildProgress] = {}
        self._warm_up: asyncio.Task | None = None
        self.rpc: RpcServer | None = None  # CLI clients' socket, once a config is loaded

    # Lifecycle -------------------------------------------------------------------------------

    def initialize(self, params: types.InitializeParams) -> None:
        self.apply_settings(params.initialization_options)
        root = self.workspace.root_path
        if root is None and params.workspace_folders:
            root = to_fs_path(params.workspace_folders[0].uri)
        self.root = Path(root or os.getcwd())

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.pool = WorkerPool(max_workers=self.settings.workers or self.default_workers)
        self.scheduler = Scheduler(self.pool, self, self.build_request)
        self.watcher = ProjectWatcher(self.root, self.file_changed, loop)
        self.load_project()
        try:
            self.watcher.start()
        except OSError as error:  # e.g. out of inotify watches: saves in the editor still work
            self.log_message(f"lowerd: not watching files changed outside the editor: {error}")

    def _warm_up_workers(self) -> None:
        """Starts the fork server's warm-up (torch, ExecuTorch: seconds) once there is something
        to build, so that a workspace without a lowerd config never pays for it."""
        if self.pool is not None and self._warm_up is None:
            self._warm_up = asyncio.get_running_loop().create_task(self._start_pool(self.pool))

    async def _start_pool(self, pool: WorkerPool) -> None:
        try:
            await pool.start()
        except Exception as error:  # each build retries starting it; say why this one failed
            self.log_message(f"lowerd: the build workers did not start: {error}", error=True)

    async def stop(self) -> None:
        if self.rpc:
            await self.rpc.close()
            self.rpc = None
        if self.watcher:
            self.watcher.stop()
        if self.scheduler:
            self.scheduler.cancel_all()
        if self.pool:
            await self.pool.close()

    def apply_settings(self, raw: Any) -> None:
        before = self.settings
        self.settings, problems = self.settings.updated(raw)
        for problem in problems:
            self.log_message(problem, error=True)
        if self.scheduler is None:
            return
        if self.settings.workers != before.workers:
            self.log_message("lowerd: a new `workers` setting takes effect on restart")
        if (self.settings.config, self.settings.backends) != (before.config, before.backends):
            self.load_project(rebuild=self.settings.backends != before.backends)
        elif self.settings.not_delegated_severity != before.not_delegated_severity:
            self.publish()

    async def pull_settings(self) -> None:
        workspace = self.client_capabilities.workspace
        if workspace and workspace.configuration:
            asked = types.ConfigurationParams([types.ConfigurationItem(section=SECTION)])
            [settings] = await self.workspace_configuration_async(asked)
            self.apply_settings(settings)

    # The project -----------------------------------------------------------------------------

    def load_project(self, rebuild: bool = False) -> None:
        """(Re)load the config; a config error replaces every target's diagnostics until fixed."""
        assert self.scheduler is not None and self.watcher is not None
        previous = self.config
        try:
            self.config_path = self._config_candidate()
            config = load_config(self.config_path).with_backends(self.settings.backends)
            self.config_error = None
        except ConfigError as error:
            config, self.config_error = None, error.to_json()
            if error.location.file:
                self.config_path = Path(error.location.file)
            else:
                self.log_message(f"lowerd: {error}", error=True)
        self.config = config
        self.scheduler.set_config(config)
        targets = config.targets if config else {}
        self.shown = {name: r for name, r in self.shown.items() if name in targets}
        if config is not None:
            self._warm_up_workers()
            self._serve_cli_clients(config)
            self.watcher.set_ignored(f for f in (config.out_dir, config.cache_dir) if f)
            changed = previous is None or (previous.path, previous.digest) != (
                config.path,
                config.digest,
            )
            if changed or rebuild:
                self.scheduler.request(config.targets, now=True)
        self.publish()
        self.refresh_code_lenses()

    def _serve_cli_clients(self, config: ProjectConfig) -> None:
        """Opens the socket of the config's project root (another root's closes first)."""
        if self.rpc is not None and self.rpc.config.root == config.root:
            return  # each request reads the config afresh: an edit needs no new socket
        previous, self.rpc = self.rpc, RpcServer(config, BuildService(self.pool), "lsp", _no_op)
        spawn(self._open_socket(previous, self.rpc))

    async def _open_socket(self, previous: RpcServer | None, rpc: RpcServer) -> None:
        if previous is not None:
            await previous.close()
        try:
            if not await rpc.start():  # a headless daemon has the project: clients keep it
                self.log_message(f"lowerd: another daemon serves {rpc.config.root} to the CLI")
        except (RuntimeDirError, OSError) as error:
            self.log_message(f"lowerd: `lowerd build` cannot share this server: {error}")

    def _config_candidate(self) -> Path:
        if self.settings.config:
            return self.root / Path(self.settings.config).expanduser()
        try:
            return find_config(self.root)
        except ConfigError:
            if (self.root / PYPROJECT).is_file():  # says why it does not declare lowerd
                return self.root / PYPROJECT
            raise

    def file_changed(self, path: Path) -> None:
        """A save in the editor or a change on disk: reload the config, or rebuild its targets."""
        if self.scheduler is None or not self.scheduler.note_change(path):
            return
        if self._is_config(path):
            self.load_project()
        else:
            self.scheduler.rebuild_for(path)

    def _is_config(self, path: Path) -> bool:
        if self.config_path is not None and _same_file(path, self.config_path):
            return True
        return self.config is None and path.name == PYPROJECT

    def build_request(self, target: TargetConfig) -> BuildRequest:
        assert self.config is not None
        return BuildRequest(
            config_path=str(self.config.path),
            target=target.name,
            timeout=self.settings.timeout(self.config.timeout),
            memory_limit=self.settings.memory_limit,
            backends=self.settings.backends,
        )

    # Builds (the Scheduler's listener) -------------------------------------------------------

    def build_started(self, target: str, build_id: int) -> None:
        self.protocol.notify(BUILD_STARTED, {"target": target, "buildId": build_id})
        if self._client_has_progress():
            self.progress[build_id] = _BuildProgress(self, target, build_id)
        self.refresh_code_lenses()

    def build_event(self, target: str, build_id: int, event: dict[str, Any]) -> None:
        if event.get("type") == "progress":
            if progress := self.progress.get(build_id):
                progress.report(event.get("stage", ""), event.get("detail"))
        elif event.get("type") == "partitioned":
            self._show_partitioned(target, event["method"], event["report"])

    def build_finished(
        self, target: str, build_id: int | None, result: dict[str, Any], current: bool
    ) -> None:
        error = result.get("error") or {}
        if build_id is not None and (progress := self.progress.pop(build_id, None)):
            progress.end(error.get("kind") or "done")
        self.protocol.notify(
            BUILD_FINISHED,
            {
                "target": target,
                "buildId": build_id,
                "status": result.get("status"),
                "errorKind": error.get("kind"),
                "reused": result.get("reused"),
                "current": current,
            },
        )
        if not current:
            return  # superseded by a newer build of the target, which will say what to show
        self.shown[target] = result
        if error.get("kind") in ("worker-crash", "worker-timeout"):
            self.log_message(f"lowerd: {target}: {error.get('message')}", error=True)
        self.publish()
        self.refresh_code_lenses()

    def _show_partitioned(self, target: str, method: str, report: dict[str, Any]) -> None:
        """Coverage as soon as a method is partitioned, before preprocess and emission."""
        last = self.shown.get(target) or {}
        methods = dict(last.get("methods") or {}) if last.get("status") == "ok" else {}
        methods[method] = report
        self.shown[target] = {
            "name": target,
            "status": "ok",
            "methods": methods,
            "error": None,
            "entry": last.get("entry"),
            "modules": last.get("modules") or {},
        }
        self.publish()

    # Diagnostics -----------------------------------------------------------------------------

    def publish(self, force: Sequence[str] = ()) -> None:
        """Sends every file's diagnostics that changed, and an empty list to each file that had
        some and has none now, so that fixed problems disappear."""
        by_uri = {from_fs_path(str(path)): found for path, found in self._diagnostics().items()}
        for uri in sorted(set(by_uri) | set(self.published) | set(force)):
            found = by_uri.get(uri, [])
            if uri in force or self.published.get(uri, []) != found:
                self.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=uri, diagnostics=found)
                )
        self.published = {uri: found for uri, found in by_uri.items() if found}

    def _diagnostics(self) -> FileDiagnostics:
        if self.config_error is not None:
            if self.config_error.get("file") is None or self.config_path is None:
                return {}
            return config_error_diagnostics(self.config_error, self.config_path, self.read_lines)
        if self.config is None:
            return {}
        parts = []
        severity = self.settings.not_delegated_severity
        for name, result in self.shown.items():
            target = self.config.targets.get(name)
            if target is not None:
                entry = entry_site(self.config, target)
                parts.append(
                    result_diagnostics(result, self.config.root, entry, severity, self.read_lines)
                )
        return merge(*parts)

    def read_lines(self, path: Path) -> Sequence[str]:
        """The editor's text of an open file (what ranges apply to), else the file on disk."""
        document = self.workspace.text_documents.get(from_fs_path(str(path)))
        if document is not None:
            return document.lines
        return read_lines_from_disk(path)

    # Code lens, hover, commands --------------------------------------------------------------

    def code_lenses(self, uri: str) -> list[types.CodeLens]:
        if self.config is None or self.scheduler is None:
            return []
        path = Path(to_fs_path(uri) or "")
        lenses = []
        for name, target in self.config.targets.items():
            result = self.scheduler.results.get(name)  # the last complete one
            site = site_of((result or {}).get("entry"), self.config.root)
            site = site or entry_site(self.config, target)
            if not _same_file(site.path, path):
                continue
            where = line_range(site, self.read_lines)
            title = lens_title(result, self.scheduler.building(name))
            if len(self.config.targets) > 1:
                title = title.replace("lowerd: ", f"lowerd {name}: ", 1)
            lenses.append(_lens(where, title, REPORT, name))
            lenses.append(_lens(where, "Build .pte", BUILD, name))
        return lenses

    def hover(self, uri: str, line: int) -> types.Hover | None:
        if self.config is None:
            return None
        site = Site(Path(to_fs_path(uri) or ""), line + 1)
        text = hover_markdown(self.shown, self.config.root, site)
        if text is None:
            return None
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value=text),
            range=line_range(site, self.read_lines),
        )

    async def build(self, names: Sequence[str]) -> dict[str, Any]:
        """Builds the targets now (a recorded build still up to date is reused) and returns their
        results as `lowerd build --json` would."""
        if self.config is None or self.scheduler is None:
            return self.report(names)
        unknown = [n for n in names if n not in self.config.targets]
        if unknown:
            return {"error": f"unknown targets: {', '.join(unknown)}", "targets": []}
        self.scheduler.request(names, now=True)
        results = await self.scheduler.wait_idle(names)
        return {"config": str(self.config.path), "targets": [results[name] for name in names]}

    def report(self, names: Sequence[str]) -> dict[str, Any]:
        """The last result of each target (all by default), and which are being rebuilt."""
        if self.config is None or self.scheduler is None:
            return {"config": None, "error": self.config_error, "targets": []}
        names = list(names) or list(self.config.targets)
        return {
            "config": str(self.config.path),
            "error": None,
            "targets": [self.scheduler.results.get(n) or {"name": n} for n in names],
            "building": [n for n in names if self.scheduler.building(n)],
        }

    # Talking to the client -------------------------------------------------------------------

    def refresh_code_lenses(self) -> None:
        workspace = self.client_capabilities.workspace
        lens = workspace.code_lens if workspace else None
        if lens is not None and lens.refresh_support:
            self.workspace_code_lens_refresh(None)

    def log_message(self, message: str, error: bool = False) -> None:
        kind = types.MessageType.Error if error else types.MessageType.Info
        self.window_log_message(types.LogMessageParams(type=kind, message=message))

    def _client_has_progress(self) -> bool:
        window = self.client_capabilities.window
        return bool(window and window.work_done_progress)


class _BuildProgress:
    """One build's $/progress: created, begun, reported stage by stage, ended."""

    def __init__(self, server: LowerdServer, target: str, build_id: int):
        self.server = server
        self.target = target
        self.token = f"lowerd-build-{build_id}"
        self.begun = asyncio.get_running_loop().create_task(self._begin())

    async def _begin(self) -> bool:
        progress = self.server.work_done_progress
        try:
            await progress.create_async(self.token)
        except Exception:  # the client refused: the build goes on without a progress bar
            return False
        title = f"lowerd: {self.target}"
        progress.begin(self.token, types.WorkDoneProgressBegin(title=title, percentage=0))
        return True

    def report(self, stage: str, detail: str | None) -> None:
        if not self._has_begun():
            return
        percentage = _STAGE_PERCENT.get(stage, 0)
        if stage == "preprocess" and detail and "/" in detail:
            done, _, total = detail.partition("/")
            if done.isdigit() and total.isdigit() and int(total):
                percentage += _PREPROCESS_SPAN * min(int(done), int(total)) // int(total)
        message = f"{stage} {detail}" if detail else stage
        self.server.work_done_progress.report(
            self.token, types.WorkDoneProgressReport(message=message, percentage=percentage)
        )

    def end(self, message: str) -> None:
        def send(_: asyncio.Task) -> None:
            if self._has_begun():
                end = types.WorkDoneProgressEnd(message=message)
                self.server.work_done_progress.end(self.token, end)

        self.begun.add_done_callback(send)

    def _has_begun(self) -> bool:
        done = self.begun.done() and not self.begun.cancelled()
        return done and self.begun.exception() is None and self.begun.result()


def _lens(where: types.Range, title: str, command: str, target: str) -> types.CodeLens:
    return types.CodeLens(
        range=where, command=types.Command(title=title, command=command, arguments=[target])
    )


def _no_op() -> None:
    pass


def _same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _names(arguments: Sequence[Any] | None) -> list[str]:
    """Command arguments: target names, or one list of them."""
    names: list[str] = []
    for argument in arguments or []:
        names.extend(argument if isinstance(argument, list) else [argument])
    return [str(name) for name in names]


def create_server(workers: int = 2) -> LowerdServer:
    server = LowerdServer(workers)

    @server.feature(types.INITIALIZE)
    def initialize(ls: LowerdServer, params: types.InitializeParams) -> None:
        ls.initialize(params)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: LowerdServer, params: types.InitializedParams) -> None:
        await ls.start()

    @server.feature(types.SHUTDOWN)
    async def shutdown(ls: LowerdServer, params: None) -> None:
        await ls.stop()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: LowerdServer, params: types.DidOpenTextDocumentParams) -> None:
        path = to_fs_path(params.text_document.uri)
        if ls.scheduler is not None and path:  # some editors forget diagnostics of closed files
            ls.publish(force=[from_fs_path(path)])

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: LowerdServer, params: types.DidSaveTextDocumentParams) -> None:
        path = to_fs_path(params.text_document.uri)
        if path:
            ls.file_changed(Path(path))

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

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: LowerdServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        return ls.code_lenses(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: LowerdServer, params: types.HoverParams) -> types.Hover | None:
        return ls.hover(params.text_document.uri, params.position.line)

    @server.command(BUILD)
    async def build(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        return await ls.build(_names(arguments))

    @server.command(BUILD_ALL)
    async def build_all(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        return await ls.build(list(ls.config.targets) if ls.config else [])

    @server.command(REPORT)
    def report(ls: LowerdServer, *arguments: Any) -> dict[str, Any]:
        return ls.report(_names(arguments))

    return server


def serve(tcp: tuple[str, int] | None = None, workers: int = 2) -> int:
    server = create_server(workers)
    if tcp is not None:
        server.start_tcp(*tcp)
        return 0
    stdin, stdout = _protocol_streams()
    server.start_io(stdin, stdout)
    return 0


def _protocol_streams() -> tuple[Any, Any]:
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
