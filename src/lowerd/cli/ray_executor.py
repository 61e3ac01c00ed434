"""`lowerd build --executor ray`: every stale target built as a task on a Ray cluster.

The steps around the build are the local build's (lowerd.project.batch): up-to-date targets are
answered here from their records, without Ray doing anything; each stale one becomes a Ray task
(cli/ray_task.py) that builds it in a copy of the project with the local workers' code, and
returns the result, the .pte and the data files, which are written here atomically
(cli/ray_outputs.py). The printed report, the JSON document (but for `seconds`, and `"executor":
"ray"`) and the exit code are a local build's.

- Where: `--ray-address` / `ray_address`, else what `ray.init()` finds by itself ($RAY_ADDRESS,
  else a cluster `ray start` began on this machine), else a Ray instance started for this build
  and stopped with it.
- Each task asks for one CPU and, once the target has built, its last peak RSS as `memory` (at
  most the largest node's); a task whose worker dies is retried once (Ray's max_retries), then
  reported as a `worker-crash` at the entry function.
- The project goes to the nodes as the job's runtime_env working_dir, without out_dir, the
  virtualenv, VCS and tool caches (Ray also leaves out what .gitignore lists); $LOWERD_*
  travel with it, so the nodes use the same cache settings ($LOWERD_CACHE_URL: the redis tier).
- Ray's own log records and warnings are shown only with --verbose, as other libraries'.
- Ctrl-C cancels the tasks (ray.cancel(force=True)); their build forks die with them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import msgpack

from lowerd.cli.build_output import BuildAsk, ProgressLine, progress_printer
from lowerd.cli.exit_codes import EXIT_USAGE, exit_code
from lowerd.cli.ray_outputs import take_payload
from lowerd.cli.ray_task import PAYLOAD_VERSION, build_on_node
from lowerd.project.batch import Batch
from lowerd.project.build_state import load_state, tool_versions
from lowerd.project.config import ProjectConfig, TargetConfig, choose_config
from lowerd.project.hash_seed import pinned
from lowerd.project.library_output import log_level, route_library_logs
from lowerd.project.result import TargetResult

MISSING_RAY = "needs Ray: pip install 'lowerd[ray]'"
# A task whose worker process or node died runs once more; a model that kills it every time is
# then reported, not retried for ever.
MAX_RETRIES = 1
# Never sent to the nodes: environments, VCS data, caches and what builds write (gitignore
# patterns, relative to the project root; out_dir and cache_dir are added when inside it).
EXCLUDES = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    "*.pte",
    "*.ptd",
    "*.etrecord",
)


def run_ray_build(ask: BuildAsk, address: str | None, asked_by: str) -> int:
    """The build with its stale targets on Ray; `asked_by` names the flag or key that chose Ray
    (for the message when Ray is not installed); --jobs caps the tasks in flight (default: all)."""
    started_ns = time.time_ns()
    try:
        ray = _import_ray()
    except ImportError:
        print(f"lowerd: {asked_by} {MISSING_RAY}", file=sys.stderr)
        return EXIT_USAGE
    batch = Batch.load(choose_config(ask.config_path), ask.target_names, ask.use_cache)
    address = address or batch.config.ray_address
    batch.answer_up_to_date()
    node_warnings: list[str] = []
    if batch.stale:
        stdout = sys.stdout
        try:
            node_warnings = _build_stale(ray, batch, address, ask.jobs, started_ns)
        except _Unreachable as error:
            print(f"lowerd: {error}", file=sys.stderr)
            return EXIT_USAGE
        finally:
            sys.stdout = stdout  # stdout carries lowerd's report again (see _connect)
    document, outcome = batch.outcome()
    warnings = [*document["warnings"], *node_warnings]
    document["warnings"] = list(dict.fromkeys(warnings))  # each node says it once here
    document["executor"] = "ray"
    ask.print_outcome(document)
    return exit_code(outcome)


class _Unreachable(Exception):
    """Ray could not be started or reached, or would not take the project."""


def _build_stale(
    ray: ModuleType, batch: Batch, address: str | None, jobs: int | None, started_ns: int
) -> list[str]:
    """Build the batch's stale targets on Ray; what the nodes said of their caches."""
    try:
        try:
            _connect(ray, batch.config, address)
        except Exception as error:  # Ray raises ConnectionError, RuntimeError, ValueError...
            where = f"the Ray cluster at {address}" if address else "a local Ray instance"
            raise _Unreachable(f"could not use {where}: {_first_line(error)}") from error
        progress = progress_printer()
        try:
            tasks = _Tasks(ray, batch.config, batch.use_cache, started_ns, progress)
            batch.results.update(tasks.run(batch.stale, jobs))
            return tasks.warnings
        finally:
            if progress:
                progress.clear()
    finally:
        ray.shutdown()  # also stops the instance ray.init() started, if it started one


def _import_ray() -> ModuleType:
    import ray

    route_library_logs(("ray",))  # its import set up console handlers: behind --verbose
    return ray


def _connect(ray: ModuleType, config: ProjectConfig, address: str | None) -> None:
    # Ray's driver prints what the raylet reports (a worker that died, say) on sys.stdout, where
    # the report or the JSON document goes, and no option turns that off: until ray.shutdown()
    # (the caller restores it), stdout's lines become Ray's log records, behind --verbose.
    # lowerd itself writes nothing on stdout before the build ends.
    sys.stdout = _LinesToLog(logging.getLogger("ray.driver"))
    ray.init(
        address=address,
        runtime_env=runtime_env(config),
        log_to_driver=False,  # the workers' output comes back in each task's payload
        configure_logging=False,
        logging_level=log_level("ERROR", "LOWERD_LOG_LEVEL"),
        include_dashboard=False,
    )
    route_library_logs(("ray",))  # loggers ray.init made


def runtime_env(config: ProjectConfig) -> dict[str, Any]:
    """The project as the tasks' working folder, and lowerd's environment variables."""
    import os

    excludes = list(EXCLUDES)
    for folder in (config.out_dir, config.cache_dir):
        if folder is not None and folder.resolve().is_relative_to(config.root.resolve()):
            excludes.append("/" + folder.resolve().relative_to(config.root.resolve()).as_posix())
    env_vars = {name: value for name, value in os.environ.items() if name.startswith("LOWERD_")}
    env_vars = pinned(env_vars)  # the nodes lower under lowerd's hash seed, as a local build
    return {"working_dir": str(config.root), "excludes": excludes, "env_vars": env_vars}


class _Tasks:
    """The stale targets' tasks: submitted, awaited, cancelled when interrupted."""

    def __init__(
        self,
        ray: ModuleType,
        config: ProjectConfig,
        use_cache: bool,
        started_ns: int,
        progress: ProgressLine | None,
    ):
        self.ray = ray
        self.config = config
        self.use_cache = use_cache
        self.started_ns = started_ns
        self.progress = progress
        self.warnings: list[str] = []
        self.node_memory = _largest_node_memory(ray)
        self.task = ray.remote(build_on_node)

    def run(self, targets: Sequence[TargetConfig], jobs: int | None) -> dict[str, TargetResult]:
        waiting = list(targets)
        running: dict[Any, TargetConfig] = {}  # object ref -> its target
        results: dict[str, TargetResult] = {}
        try:
            while waiting or running:
                while waiting and (jobs is None or len(running) < jobs):
                    target = waiting.pop(0)
                    running[self._submit(target)] = target
                ready, _ = self.ray.wait(list(running), num_returns=1)
                for ref in ready:
                    target = running.pop(ref)
                    results[target.name] = self._receive(ref, target)
                    if self.progress:
                        done = f"{len(results)} of {len(targets)} on Ray"
                        self.progress("built", target.name, done)
        finally:  # interrupted: the tasks still running are killed, their forks with them
            for ref in running:
                with contextlib.suppress(Exception):
                    self.ray.cancel(ref, force=True)
        return results

    def _submit(self, target: TargetConfig) -> Any:
        options: dict[str, Any] = {"num_cpus": 1, "max_retries": MAX_RETRIES}
        options["name"] = f"lowerd build {target.name}"
        memory = self._memory(target)
        if memory:
            options["memory"] = memory
        task = self.task.options(**options)
        config_name = self.config.path.relative_to(self.config.root).as_posix()
        versions = list(tool_versions())
        return task.remote(config_name, target.name, self.use_cache, versions, self.config.digest)

    def _memory(self, target: TargetConfig) -> int | None:
        """The target's last peak RSS, at most what the largest node has: a larger ask would
        leave the task waiting for a node that never comes."""
        state = load_state(self.config, target)
        if state is None or not state.peak_rss:
            return None
        return min(state.peak_rss, self.node_memory) if self.node_memory else state.peak_rss

    def _receive(self, ref: Any, target: TargetConfig) -> TargetResult:
        from lowerd.worker.entry_site import failed_at_entry

        try:
            packed = self.ray.get(ref)
        except self.ray.exceptions.RayError as error:
            return failed_at_entry(self.config, target.name, "worker-crash", _failure(error))
        payload = msgpack.unpackb(packed, raw=False)
        if payload.get("version") != PAYLOAD_VERSION:
            message = "the Ray node runs another lowerd: install the same version"
            return TargetResult.failed(target.name, "executor-error", message)
        if payload["stderr"]:  # what the build printed, where a local build prints it
            sys.stderr.write(payload["stderr"])
            sys.stderr.flush()
        self.warnings.extend(payload["warnings"])
        return take_payload(self.config, target, payload, self.started_ns)


class _LinesToLog(io.TextIOBase):
    """A text stream whose lines are DEBUG records of `log`, terminal colours taken out."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self.pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.strip():
                self.log.debug("%s", _COLOURS.sub("", line))
        return len(text)


_COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def _largest_node_memory(ray: ModuleType) -> int | None:
    try:
        sizes = [node["Resources"].get("memory", 0) for node in ray.nodes() if node["Alive"]]
    except Exception:  # a cluster that will not say: ask for the peak as it is
        logging.getLogger(__name__).debug("ray.nodes() failed", exc_info=True)
        return None
    return int(max(sizes)) if sizes else None


def _failure(error: Exception) -> str:
    """Why a task gave no payload, in a line: its worker or node died (after the retry), Ray
    could not set the project up on the node, or lowerd failed there (not installed, say)."""
    import ray.exceptions as errors

    died = (errors.WorkerCrashedError, errors.NodeDiedError, errors.ObjectLostError)
    if isinstance(error, errors.OutOfMemoryError):
        return f"Ray's memory monitor killed the task: {_first_line(error)}"
    if isinstance(error, died):
        tries = MAX_RETRIES + 1
        return f"the Ray worker building it died ({tries} tries): {_first_line(error)}"
    if isinstance(error, errors.RuntimeEnvSetupError):
        return f"Ray could not set the project up on the node: {_last_line(error)}"
    if isinstance(error, errors.RayTaskError):
        return f"the Ray task failed: {_last_line(error)}"
    return f"the Ray task failed: {_first_line(error)}"


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__
