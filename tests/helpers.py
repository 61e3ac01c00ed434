"""Helpers shared by the test modules: one deadline, atomic edits, waiting on a condition.

No test module imports another; what two of them share lives here (or in stock.py when it is
about the stock ExecuTorch reference), and what they share with the benches in testkit/.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import pickle
import re
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lowerd.cache.store import BlobStore
from lowerd.daemon.runtime import DaemonPaths, DaemonStatus, read_status
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode
from lowerd.worker.protocol import WorkerEvent, WorkerJob, parse_event

from testkit.projects import copy_project

T = TypeVar("T")

TESTS = Path(__file__).resolve().parent
PROJECTS = TESTS / "projects"
TRACEBACK = "Traceback (most recent call last)"

# One deadline for every wait in the tests, in seconds. It is a bound on a hang, not a measure:
# a loaded machine (CI, other engineers' runs) raises LOWERD_TEST_TIMEOUT_SCALE, never the tests.
DEADLINE = 120 * float(os.environ.get("LOWERD_TEST_TIMEOUT_SCALE", "1"))
# tests/projects/basic with tiny_linear alone: the cheapest build there is.
ONE_TARGET = """\
[tool.lowerd]
backends = ["xnnpack"]
out_dir = "build"

[tool.lowerd.targets.tiny_linear]
entry = "models/tiny_linear.py:make"
"""
OUT_DIR_LINE = 3  # of ONE_TARGET

# A whole `lowerd build` of several targets in a fresh process (torch imports, lowering).
RUN_DEADLINE = 5 * DEADLINE

_POLL_SECONDS = 0.05


def wait_until(
    predicate: Callable[[], T], deadline: float = DEADLINE, what: str = "the condition"
) -> T:
    """Poll `predicate` until it returns something truthy and return that; fail after `deadline`
    seconds, naming `what` was awaited."""
    give_up = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(f"waited {deadline:.0f} s for {what}")
        time.sleep(_POLL_SECONDS)


async def async_wait_until(
    predicate: Callable[[], T], deadline: float = DEADLINE, what: str = "the condition"
) -> T:
    """wait_until for a test on an event loop: the loop runs while the condition is polled."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > give_up:
            raise AssertionError(f"waited {deadline:.0f} s for {what}")
        await asyncio.sleep(_POLL_SECONDS)


# LINE-MARK comments: where tests expect a line (tests/projects/README.md) ----------------------

_LINE_MARK = re.compile(r"LINE-MARK: (\S+)\s*$")


def line_marks(root: Path) -> dict[str, tuple[str, int]]:
    """LINE-MARK name -> (file relative to root, 1-based line) over the project's files."""
    marks: dict[str, tuple[str, int]] = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".toml") or not path.is_file():
            continue
        if {"build", "__pycache__"} & set(path.relative_to(root).parts):
            continue
        for number, text in enumerate(path.read_text().splitlines(), start=1):
            match = _LINE_MARK.search(text)
            if match:
                assert match[1] not in marks, f"LINE-MARK {match[1]} is used twice"
                marks[match[1]] = (path.relative_to(root).as_posix(), number)
    return marks


# The `lowerd` command as a subprocess ----------------------------------------------------------


@dataclass
class Run:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        """The whole of stdout as one JSON document: library chatter must not leak into it."""
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError as error:
            pytest.fail(f"stdout is not one JSON document ({error})\n{self.log}")

    @property
    def log(self) -> str:
        """The run for an assertion message: pytest shows a str in full, an object's repr cut."""
        return (
            f"lowerd {' '.join(self.args)} -> exit {self.returncode}\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"
        )


def lowerd_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ, LOWERD_CACHE_DIR=str(cache))
    env.pop("LOWERD_LOG_LEVEL", None)
    return env


def lowerd(cwd: Path, cache: Path, *args: str) -> Run:
    """`python -m lowerd ARGS` in cwd, with its blob cache in `cache`."""
    return _run([sys.executable, "-m", "lowerd", *args], cwd, cache, list(args))


def lowerd_debug(cwd: Path, cache: Path, *args: str) -> Run:
    """`lowerd(...)` with LOWERD_LOG_LEVEL=DEBUG: the libraries' own log records shown."""
    command = [sys.executable, "-m", "lowerd", *args]
    return _run(command, cwd, cache, list(args), LOWERD_LOG_LEVEL="DEBUG")


# Runs the command's main() in-process, then fails (exit 99) if it imported torch or executorch.
_WITHOUT_TORCH = """\
import sys
import lowerd.cli.main
code = lowerd.cli.main.main(sys.argv[1:])
heavy = sorted(m for m in ("torch", "executorch") if m in sys.modules)
if heavy:
    print(f"IMPORTED {heavy}", file=sys.stderr)
    sys.exit(99)
sys.exit(code)
"""


def lowerd_without_torch(cwd: Path, cache: Path, *args: str) -> Run:
    return _run([sys.executable, "-c", _WITHOUT_TORCH, *args], cwd, cache, list(args))


def _run(command: list[str], cwd: Path, cache: Path, args: list[str], **env: str) -> Run:
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**lowerd_env(cache), **env},
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE,
        check=False,
    )
    return Run(args, done.returncode, done.stdout, done.stderr)


# Builds shared by several test modules (conftest.py's session fixtures) ------------------------

EXAMPLES = TESTS.parent / "examples"
# The targets the shared examples/ build lowers: all but `llm`, whose build alone costs about half
# a minute (tests/test_llm_example.py builds it).
EXAMPLE_TARGETS = ["cnn", "transformer", "encoder_decoder", "dynamic_mlp", "cnn_int8", "cnn_per_op"]

# A user's own output, appended to the CNN of the shared examples/ build: a print and a warning
# at import, which must still show on stderr (tests/test_quiet_output.py). The model is the same.
USER_OUTPUT = """

import warnings as _warnings

print("cnn: made by the user")
_warnings.warn("cnn: the user's own warning", UserWarning, stacklevel=1)
"""


@dataclass(frozen=True)
class SharedBuild:
    """A project copy built once per session, its blob cache, and the run: read it, never write
    to it (copy the project or the cache to build on)."""

    root: Path
    cache: Path
    run: Run


def made_once_per_run(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """What `make` returns for an empty folder, made once per test run. Under pytest-xdist each
    worker is a session of its own, so a session fixture alone would make it once a worker: the
    first worker to ask makes it in the run's common temporary folder, under a lock, and pickles
    it there; the others wait on the lock and read it. `make` returns data about the files it
    wrote in the folder, which every user only reads."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return make(factory.mktemp(name))
    common = run_folder(factory) / name
    with open(f"{common}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        made = common / "made.pickle"
        if made.is_file():
            value: T = pickle.loads(made.read_bytes())
            return value
        shutil.rmtree(common, ignore_errors=True)  # what a worker that failed left
        common.mkdir()
        value = make(common)
        made.write_bytes(pickle.dumps(value))
        return value


def run_folder(factory: pytest.TempPathFactory) -> Path:
    """Under pytest-xdist, a folder of this run that every worker sees: the workers' temporary
    folders' parent, named by the run's id (a --basetemp given again keeps the last run's)."""
    folder = factory.getbasetemp().parent / f"run-{os.environ['PYTEST_XDIST_TESTRUNUID']}"
    folder.mkdir(exist_ok=True)
    return folder


def build_examples(folder: Path) -> SharedBuild:
    """examples/ copied into folder, USER_OUTPUT appended to its models/cnn.py, and its
    EXAMPLE_TARGETS built by `lowerd build --json --no-daemon` (in-process: the workers' output
    reaches this stderr) on a cold cache."""
    root = copy_project(EXAMPLES, folder / "examples")
    with (root / "models" / "cnn.py").open("a") as model:
        model.write(USER_OUTPUT)
    cache = folder / "cache"
    run = lowerd(root, cache, "build", "--json", "--no-daemon", *EXAMPLE_TARGETS)
    return SharedBuild(root, cache, run)


def build_basic(folder: Path) -> SharedBuild:
    """tests/projects/basic copied into folder and built, every target, by `lowerd build --json`
    on a cold cache: the cold build tests/test_cli.py, tests/test_daemon_rpc.py and
    tests/test_cache_integrity.py compare with or start from."""
    root = copy_project(PROJECTS / "basic", folder / "basic")
    cache = folder / "cache"
    return SharedBuild(root, cache, lowerd(root, cache, "build", "--json"))


def build_broken_at_debug(folder: Path) -> SharedBuild:
    """tests/projects/broken copied into folder and every target built by `lowerd build --json`
    with LOWERD_LOG_LEVEL=DEBUG: tests/test_cli.py reads its document (every target failed, at
    its line: the errors are its table run's, made at the default level), and
    tests/test_cli_isolation.py its stderr (torch's own account of export_fail's failure)."""
    root = copy_project(PROJECTS / "broken", folder / "broken")
    cache = folder / "cache"
    return SharedBuild(root, cache, lowerd_debug(root, cache, "build", "--json"))


def build_named_without_cache(folder: Path) -> SharedBuild:
    """tests/projects/basic copied into folder and its `tiny_linear` alone built by `lowerd build
    tiny_linear --no-daemon --json` with a file where its cache folder would be (so, with no
    cache): tests/test_cli.py reads it as a named target's build, tests/test_cache_integrity.py
    as a build whose cache is unusable."""
    root = copy_project(PROJECTS / "basic", folder / "basic")
    not_a_folder = folder / "cache"
    not_a_folder.write_bytes(b"")
    run = lowerd(root, not_a_folder, "build", "tiny_linear", "--no-daemon", "--json")
    return SharedBuild(root, not_a_folder, run)


@dataclass(frozen=True)
class ColdBuild:
    """One target of a fixture project built in-process on a cold cache, with reuse off (every
    build lowers, so each build's bytes are its own): the result, which tests only read, and the
    cache, which each test copies to build on."""

    project: str  # the folder under tests/projects
    target: str
    result: TargetResult
    cache: Path

    @classmethod
    def made(cls, folder: Path, project: str, target: str) -> ColdBuild:
        root = copy_project(PROJECTS / project, folder / project)
        config = load_config(root / "pyproject.toml")
        result = cold_rebuild(config, target, folder / "cache")
        return cls(project, target, result, folder / "cache")

    def copied(self, folder: Path) -> tuple[ProjectConfig, BlobStore]:
        """A fresh copy of the project, and a store on a copy of the cache its cold build
        filled."""
        root = copy_project(PROJECTS / self.project, folder / self.project)
        store = BlobStore(shutil.copytree(self.cache, folder / "cache"))
        return load_config(root / "pyproject.toml"), store


def cold_rebuild(config: ProjectConfig, target: str, cache: Path | BlobStore) -> TargetResult:
    """The target built in-process with reuse off, on the store or the cache folder given; the
    project's modules imported afresh."""
    from lowerd.lowering.build import build_target  # the engine: imported by the tests that build

    from stock import forget_project_modules

    forget_project_modules(config.root)
    store = BlobStore(cache) if isinstance(cache, Path) else cache
    result = build_target(config, config.targets[target], store, reuse=False)
    forget_project_modules(config.root)
    assert result.status == "ok", result.error
    return result


def daemon_of(root: Path) -> DaemonStatus | None:
    """The status of the daemon serving the project, if one does."""
    return read_status(DaemonPaths.for_root(root))


def shas(document: dict[str, Any]) -> dict[str, str]:
    return {target["name"]: target["sha256"] for target in document["targets"]}


def without_timing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


# A worker pool for unit tests of what drives one (the Scheduler, the BuildService) ------------


@dataclass
class FakeBuild:
    """A submitted build that ends when the test says: finish(), or cancel() as the pool would.
    Events and results are given as the worker's frames, and reach the pool's user typed, as the
    real pool parses them (worker/protocol.py)."""

    build_id: int
    job: WorkerJob
    pool_event: Callable[[WorkerEvent], None]
    future: asyncio.Future[TargetResult]
    pid: int = 4242
    cancelled: bool = False
    peak_rss: int | None = None

    @property
    def target(self) -> str:
        return self.job.target

    def on_event(self, frame: dict[str, Any]) -> None:
        self.pool_event(parse_event(frame))

    async def result(self) -> TargetResult:
        return await asyncio.shield(self.future)

    def cancel(self) -> None:
        """What the real pool does: the worker is killed and the result says so."""
        self.cancelled = True
        if not self.future.done():
            self.future.set_result(TargetResult.failed(self.target, "cancelled", "cancelled"))

    def finish(self, result: dict[str, Any] | None = None, peak_rss: int | None = None) -> None:
        if peak_rss is not None:  # as the real pool keeps it, and passes the event on
            self.peak_rss = peak_rss
            self.on_event({"type": "peak_rss", "bytes": peak_rss})
        self.future.set_result(decode(TargetResult, result or ok_result(self.target)))


@dataclass
class FakePool:
    builds: list[FakeBuild] = field(default_factory=list)
    # target -> the targets whose builds ran when it was submitted
    alongside: dict[str, list[str]] = field(default_factory=dict)

    def submit(self, job: WorkerJob, on_event: Callable[[WorkerEvent], None]) -> Any:
        self.alongside[job.target] = self.running()
        future = asyncio.get_running_loop().create_future()
        build = FakeBuild(len(self.builds) + 1, job, on_event, future)
        self.builds.append(build)
        return build

    def submitted(self) -> list[str]:
        """The targets of every build submitted, in order."""
        return [b.target for b in self.builds]

    def running(self) -> list[str]:
        return [b.target for b in self.builds if not b.future.done()]

    def build_of(self, target: str) -> FakeBuild:
        """The target's running build."""
        [build] = [b for b in self.builds if b.target == target and not b.future.done()]
        return build


def ok_result(target: str) -> dict[str, Any]:
    return {
        "name": target,
        "status": "ok",
        "error": None,
        "reused": None,
        "cache": {"hits": 0, "misses": 0},
    }


# Config tests ---------------------------------------------------------------------------------


def write_pyproject(folder: Path, text: str) -> Path:
    """folder/pyproject.toml holding text (dedented)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(textwrap.dedent(text))
    return path


def load_error(folder: Path, text: str) -> ConfigError:
    """The ConfigError that loading text as folder/pyproject.toml raises, which names that file."""
    path = write_pyproject(folder, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.location.file == str(path)
    return info.value


def assert_config_error(folder: Path, text: str, line: int, parts: list[str]) -> None:
    """Loading text fails at that line of its pyproject.toml, with every part in the message."""
    error = load_error(folder, text)
    assert error.location.line == line, error.message
    for part in parts:
        assert part in error.message, error.message


def edit_refused_weights(project: Path) -> None:
    """basic's refused model with fc2's bias moved: a weight edit of one of its two partitions,
    written as a user would write it."""
    model = project / "models" / "refused.py"
    model.write_text(
        model.read_text().replace(
            "    return Refused().eval(), (torch.randn(2, 8),)\n",
            "    model = Refused().eval()\n"
            "    with torch.no_grad():\n"
            "        model.fc2.bias.add_(1.0)\n"
            "    return model, (torch.randn(2, 8),)\n",
        )
    )


def forks_of(pid: int) -> list[int]:
    """pid's children that are forks of it (the same command line): its build workers."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        return [int(c) for c in children if Path(f"/proc/{c}/cmdline").read_bytes() == command]
    except OSError:  # one ended meanwhile: look again
        return []


def wait_ended(pid: int, what: str, deadline: float = DEADLINE) -> None:
    """Block until the process `pid` (anyone's child) has ended: its pidfd becomes readable
    when it exits. `deadline` only bounds a failing test."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:  # ended and reaped already
        return
    try:
        readable, _, _ = select.select([pidfd], [], [], deadline)
    finally:
        os.close(pidfd)
    if not readable:
        raise AssertionError(f"waited {deadline:.0f} s for {what} to end")


def threads_of(pid: int) -> int:
    """How many threads the process `pid` has (/proc/PID/task)."""
    return len(os.listdir(f"/proc/{pid}/task"))


def interruptible() -> None:
    """A child's preexec_fn: Ctrl-C reaches it as in a terminal, even when the tests themselves
    run with SIGINT ignored (a background job of a non-interactive shell inherits SIG_IGN, and
    Python keeps it), as CI may run them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def logged(name: str) -> Iterator[list[str]]:
    """The messages logger `name` handles at DEBUG while inside (as caplog.records'
    getMessage() reads them), its level put back after."""
    messages: list[str] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, kept = logging.getLogger(name), Kept(logging.DEBUG)
    level = logger.level
    logger.addHandler(kept)
    logger.setLevel(logging.DEBUG)
    try:
        yield messages
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)
