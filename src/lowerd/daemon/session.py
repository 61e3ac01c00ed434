"""A project session: what the editor's server knows and runs for one workspace, without the LSP.

It finds and (re)loads the project's config, builds its targets through the Scheduler on the
WorkerPool, watches files changed outside the editor and opens the project's private socket
(daemon/rpc.py), so that `lowerd build` in a terminal shares its warm workers. It speaks no LSP:
what it has to say goes to a SessionListener, which the language server (daemon/server.py) turns
into diagnostics, code lenses and notifications; another front end could listen instead.

The headless daemon (daemon/headless.py) shares the socket and the workers but none of the rest:
its config is fixed by its command line, it builds only what clients ask for, through their
requests, and nothing watches its files.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from lowerd.daemon.build_service import BuildService
from lowerd.daemon.rpc import RpcServer
from lowerd.daemon.runtime import RuntimeDirError
from lowerd.daemon.scheduler import BuildListener, Scheduler
from lowerd.daemon.settings import Settings
from lowerd.daemon.watcher import ProjectWatcher
from lowerd.project.baseline import baseline_path
from lowerd.project.config import PYPROJECT, ProjectConfig, TargetConfig, find_config, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.result import ErrorInfo, TargetResult
from lowerd.worker.protocol import WorkerJob
from lowerd.worker.tasks import spawn
from lowerd.worker.workers import WorkerPool


class SessionListener(BuildListener, Protocol):
    """The front end: hears of each build (as the Scheduler's listener), of each (re)load of the
    project (its config, or its baseline), and of what the user should read in a log."""

    def project_loaded(self) -> None: ...

    def log_message(self, message: str, error: bool = False) -> None: ...


class ProjectSession:
    def __init__(self, listener: SessionListener, default_workers: int = 2):
        self.listener = listener
        self.default_workers = default_workers
        self.settings = Settings()
        self.root = Path.cwd()
        self.config: ProjectConfig | None = None
        self.config_path: Path | None = None  # the file whose change reloads the config
        self.config_error: ErrorInfo | None = None
        self.pool: WorkerPool | None = None
        self.scheduler: Scheduler | None = None
        self.watcher: ProjectWatcher | None = None
        self.rpc: RpcServer | None = None  # CLI clients' socket, once a config is loaded
        self._warm_up: asyncio.Task[None] | None = None

    # Lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Loads the project and builds its targets; watches its files from then on."""
        self.pool = WorkerPool(max_workers=self.settings.workers or self.default_workers)
        self.scheduler = Scheduler(self.pool, self.listener, self.build_job)
        self.watcher = ProjectWatcher(self.root, self.file_changed, asyncio.get_running_loop())
        self.load()
        try:
            self.watcher.start()
        except OSError as error:  # e.g. out of inotify watches: saves in the editor still work
            self._log(f"lowerd: not watching files changed outside the editor: {error}")

    @property
    def started(self) -> bool:
        return self.scheduler is not None

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

    def apply_settings(self, raw: Any) -> Settings:
        """Takes the editor's new settings (a bad value is named and ignored) and returns the
        previous ones. A new config file or backends reload the project; the rest of what the
        settings change (how diagnostics look) is the front end's to redo."""
        before = self.settings
        self.settings, problems = self.settings.updated(raw)
        for problem in problems:
            self._log(problem, error=True)
        if not self.started:
            return before  # start() loads the project with these
        if self.settings.workers != before.workers:
            self._log("lowerd: a new `workers` setting takes effect on restart")
        if (self.settings.config, self.settings.backends) != (before.config, before.backends):
            self.load(rebuild=self.settings.backends != before.backends)
        return before

    # The project -----------------------------------------------------------------------------

    def load(self, rebuild: bool = False) -> None:
        """(Re)loads the config, and builds every target if it changed (or `rebuild`). A config
        error stands for the whole project until it is fixed."""
        assert self.scheduler is not None and self.watcher is not None
        previous = self.config
        self.config = self._load_config()
        self.scheduler.set_config(self.config)
        if self.config is not None:
            self._warm_up_workers()
            self._serve_cli_clients(self.config)
            self.watcher.set_ignored(f for f in (self.config.out_dir, self.config.cache_dir) if f)
            if rebuild or _changed(previous, self.config):
                self.scheduler.request(self.config.targets, now=True)
        self.listener.project_loaded()

    def _load_config(self) -> ProjectConfig | None:
        """The config, or None with the error kept, and the file to watch for a fix either way."""
        try:
            self.config_path = self._config_candidate()
            config = load_config(self.config_path).with_backends(self.settings.backends)
        except ConfigError as error:
            self.config_error = error.info()
            if error.location.file:
                self.config_path = Path(error.location.file)
            else:
                self._log(f"lowerd: {error}", error=True)
            return None
        self.config_error = None
        return config

    def _config_candidate(self) -> Path:
        if self.settings.config:
            return self.root / Path(self.settings.config).expanduser()
        try:
            return find_config(self.root)
        except ConfigError:
            if (self.root / PYPROJECT).is_file():  # says why it does not declare lowerd
                return self.root / PYPROJECT
            raise

    def _warm_up_workers(self) -> None:
        """Starts the fork server's warm-up (torch, ExecuTorch: seconds) once there is something
        to build, so that a workspace without a lowerd config never pays for it."""
        if self.pool is not None and self._warm_up is None:
            self._warm_up = asyncio.get_running_loop().create_task(self._start_pool(self.pool))

    async def _start_pool(self, pool: WorkerPool) -> None:
        try:
            await pool.start()
        except Exception as error:  # each build retries starting it; say why this one failed
            self._log(f"lowerd: the build workers did not start: {error}", error=True)

    def _serve_cli_clients(self, config: ProjectConfig) -> None:
        """Opens the socket of the config's project root (another root's closes first)."""
        if self.rpc is not None and self.rpc.config.root == config.root:
            return  # each request reads the config afresh: an edit needs no new socket
        assert self.pool is not None
        previous, self.rpc = self.rpc, RpcServer(config, BuildService(self.pool), "lsp", _no_op)
        spawn(self._open_socket(previous, self.rpc))

    async def _open_socket(self, previous: RpcServer | None, rpc: RpcServer) -> None:
        if previous is not None:
            await previous.close()
        try:
            if not await rpc.start():  # a headless daemon has the project: clients keep it
                self._log(f"lowerd: another daemon serves {rpc.config.root} to the CLI")
        except (RuntimeDirError, OSError) as error:
            self._log(f"lowerd: `lowerd build` cannot share this server: {error}")

    # Changes and builds ----------------------------------------------------------------------

    def file_changed(self, path: Path) -> None:
        """A save in the editor or a change on disk: reload the config, show the baseline's
        warnings (or its error) again, or rebuild the file's targets."""
        if self.scheduler is None or not self.scheduler.note_change(path):
            return
        if self._is_config(path):
            self.load()
        elif self.config is not None and same_file(path, baseline_path(self.config.path)):
            self.listener.project_loaded()  # nothing to build: what is shown compares with it
        else:
            self.scheduler.rebuild_for(path)

    def _is_config(self, path: Path) -> bool:
        if self.config_path is not None and same_file(path, self.config_path):
            return True
        return self.config is None and path.name == PYPROJECT

    def build_job(self, target: TargetConfig) -> WorkerJob:
        """What a worker needs to build the target, with the editor's limits."""
        assert self.config is not None
        return WorkerJob(
            str(self.config.path),
            target.name,
            timeout=self.settings.timeout(self.config.timeout),
            memory_limit=self.settings.memory_limit,
            backends=self.settings.backends,
        )

    def building(self, name: str) -> bool:
        return self.scheduler is not None and self.scheduler.building(name)

    def last_result(self, name: str) -> TargetResult | None:
        """The target's last complete result (none while its first build runs)."""
        return self.scheduler.results.get(name) if self.scheduler is not None else None

    async def build(self, names: Sequence[str]) -> dict[str, TargetResult | None]:
        """Builds the targets now (a recorded build still up to date is reused) and returns their
        results once built; none for a target the config does not declare (any more)."""
        if self.scheduler is None:
            return {name: None for name in names}
        self.scheduler.request(names, now=True)
        return await self.scheduler.wait_idle(names)

    def _log(self, message: str, error: bool = False) -> None:
        self.listener.log_message(message, error=error)


def _changed(previous: ProjectConfig | None, config: ProjectConfig) -> bool:
    """A first config, another file or an edit of it: what was built for the old may be stale."""
    if previous is None:
        return True
    return (previous.path, previous.digest) != (config.path, config.digest)


def same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _no_op() -> None:
    """The editor's socket refuses `stop` (the editor owns the server): nothing to call."""
