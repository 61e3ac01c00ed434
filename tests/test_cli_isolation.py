"""User code cannot take `lowerd build` down, nor write into its report.

Real `lowerd` subprocesses on copies of tests/projects (crashy/, broken/):

- a target whose forward calls os._exit(3) fails alone, as a worker-crash at its entry function,
  in-process (`--no-daemon`, one job and two);
- what a model prints goes to stderr, so `--json` leaves one document on stdout, in-process and
  through the daemon;
- Ctrl-C ends an in-process build with exit code 130 and kills its running worker;
- torch's own account of an export failure (its partial graph, its log records) is shown with
  LOWERD_LOG_LEVEL=DEBUG (conftest.py's broken_debug_build, whose document tests/test_cli.py
  reads; held back without it: tests/test_cli.py reads its broken/ table run, rather than
  another process paying the torch and ExecuTorch imports).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.daemon.runtime import process_alive
from lowerd.project.hash_seed import HASH_SEED

from helpers import (
    PROJECTS,
    RUN_DEADLINE,
    TRACEBACK,
    Run,
    SharedBuild,
    forks_of,
    interruptible,
    line_marks,
    lowerd,
    lowerd_env,
    wait_until,
)
from testkit.projects import copy_project, write_text_atomic

pytestmark = pytest.mark.e2e

# The one in the middle ends its worker: the one after it must still build.
CRASH_TARGETS = ["ok", "exits_in_forward", "chatty"]
CHATTER = [
    "CHATTY-MAKE printed by the entry",
    "CHATTY-FD1 written to file descriptor 1",
    "CHATTY-FORWARD printed while exporting",
]
PARTIAL_GRAPH = "def forward(self"  # how torch.export's dump of its traced graph starts


def _crashy_build(tmp_path_factory: pytest.TempPathFactory, *args: str) -> tuple[Path, Run]:
    root = copy_project(PROJECTS / "crashy", tmp_path_factory.mktemp("crashy") / "crashy")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYTHONHASHSEED", "7")  # a caller's seed other than lowerd's
        return root, lowerd(root, cache, "build", "--no-daemon", *args, *CRASH_TARGETS)


@pytest.fixture(scope="module")
def crash_json(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    return _crashy_build(tmp_path_factory, "--json")


@pytest.fixture(scope="module")
def crash_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Run]:
    return _crashy_build(tmp_path_factory, "--jobs", "2")


def _crash_site(root: Path) -> tuple[str, int]:
    return line_marks(root)["crashy.exits_in_forward"]


# A model that ends its process ----------------------------------------------------------------


def test_a_target_that_exits_fails_alone_as_a_worker_crash_at_its_entry(
    crash_json: tuple[Path, Run],
) -> None:
    root, run = crash_json
    assert run.returncode == 1, run.log
    results = {target["name"]: target for target in run.json()["targets"]}
    assert list(results) == CRASH_TARGETS, run.log
    for name in ("ok", "chatty"):
        assert results[name]["status"] == "ok", run.log
        assert Path(results[name]["output"]).is_file(), run.log
    error = results["exits_in_forward"]["error"]
    assert results["exits_in_forward"]["status"] == "error", run.log
    assert error["kind"] == "worker-crash", run.log
    assert (error["file"], error["line"]) == _crash_site(root), run.log
    assert "exited with code 3" in error["message"], run.log
    assert not (root / "build" / "exits_in_forward.pte").exists()


def test_with_two_jobs_the_crash_is_reported_at_its_line_and_the_rest_builds(
    crash_table: tuple[Path, Run],
) -> None:
    root, run = crash_table
    assert run.returncode == 1, run.log
    file, line = _crash_site(root)
    assert "exits_in_forward: FAILED" in run.stdout, run.log
    assert f"{file}:{line}: the build worker exited with code 3" in run.stdout, run.log
    assert "2 targets built, 1 failed" in run.stdout, run.log
    for name in ("ok", "chatty"):
        assert (root / "build" / f"{name}.pte").is_file(), run.log
    assert TRACEBACK not in run.stderr, run.log


def test_a_target_that_hangs_is_stopped_at_the_configured_timeout(tmp_path: Path) -> None:
    root = copy_project(PROJECTS / "crashy", tmp_path / "crashy")
    config = root / "pyproject.toml"
    write_text_atomic(
        config, config.read_text().replace("[tool.lowerd]\n", "[tool.lowerd]\ntimeout = 2\n")
    )
    run = lowerd(root, tmp_path / "cache", "build", "--no-daemon", "--json", "hangs")
    assert run.returncode == 1, run.log
    [result] = run.json()["targets"]
    error = result["error"]
    assert error["kind"] == "worker-timeout", run.log
    assert "did not finish within 2 s" in error["message"], run.log
    source = (root / "models" / "nets.py").read_text().splitlines()
    assert error["file"] == "models/nets.py", run.log
    assert source[error["line"] - 1].startswith("def hangs("), run.log


def test_ctrl_c_exits_130_and_takes_the_running_worker_along(tmp_path: Path) -> None:
    """The worker leads its own process group, out of the terminal's Ctrl-C: the build kills it."""
    root = copy_project(PROJECTS / "crashy", tmp_path / "crashy")
    # Files, not pipes: a worker left running would hold a pipe open, and the test would wait.
    with (tmp_path / "out").open("w+") as out, (tmp_path / "err").open("w+") as err:
        build = subprocess.Popen(
            [sys.executable, "-m", "lowerd", "build", "--no-daemon", "hangs"],
            cwd=root,
            env=lowerd_env(tmp_path / "cache"),
            stdout=out,
            stderr=err,
            preexec_fn=interruptible,  # Ctrl-C as in a terminal, however the tests were started
        )
    workers: list[int] = []
    try:
        workers = wait_until(lambda: forks_of(build.pid), what="the build's worker")
        build.send_signal(signal.SIGINT)
        build.wait(timeout=RUN_DEADLINE)
        alive = [worker for worker in workers if process_alive(worker)]
    finally:
        build.kill()
        for worker in workers:  # a failed test leaves no spinning worker behind
            if process_alive(worker):
                os.killpg(worker, signal.SIGKILL)
    stdout, stderr = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert build.returncode == 130 and stdout == "", (stdout, stderr)
    assert "lowerd: interrupted" in stderr and TRACEBACK not in stderr, stderr
    assert alive == [], f"workers {alive} outlived the build"


# A model that prints ---------------------------------------------------------------------------


def test_what_a_model_prints_goes_to_stderr_not_into_the_json(
    crash_json: tuple[Path, Run],
) -> None:
    _, run = crash_json
    run.json()  # the whole of stdout is the one document
    for line in CHATTER:
        assert line in run.stderr, run.log
        assert line not in run.stdout, run.log


def test_the_entry_runs_under_lowerd_s_hash_seed_whatever_the_caller_s(
    crash_json: tuple[Path, Run],
) -> None:
    """Stock ExecuTorch's bytes depend on the string hash seed (project/hash_seed.py): the
    command runs its lowerings under one seed, whatever the environment it was started with
    gave (this test's: another seed)."""
    _, run = crash_json
    pinned = subprocess.run(
        [sys.executable, "-c", "print(hash('lowerd'))"],
        env=dict(os.environ, PYTHONHASHSEED=HASH_SEED),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert f"CHATTY-HASH {pinned}" in run.stderr, run.log


def _imports(stderr: str, module: str) -> int:
    """How many interpreters' `-X importtime` lines on stderr imported `module`."""
    return sum(1 for line in stderr.splitlines() if line.rpartition("|")[2].strip() == module)


@pytest.mark.parametrize(
    "command", [["-m", "lowerd"], [str(Path(sys.executable).with_name("lowerd"))]]
)
def test_the_command_pins_the_seed_before_it_loads_its_modules(
    command: list[str], tmp_path: Path
) -> None:
    """The re-execution under lowerd's seed discards the interpreter: the command's own modules
    (the config, the build state: a third of a second of CPU) must load only in the second
    one, or every `lowerd` call pays them twice: `python -m lowerd` and the installed script."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command, "--version"],
        cwd=tmp_path,
        env={**lowerd_env(tmp_path / "cache"), "PYTHONHASHSEED": "7"},
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.startswith("lowerd "), done
    assert _imports(done.stderr, "lowerd.project.hash_seed") == 2, done.stderr  # it re-executed
    assert _imports(done.stderr, "lowerd.cli.main") == 1, done.stderr
    assert _imports(done.stderr, "lowerd.project.config") == 1, done.stderr


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private $XDG_RUNTIME_DIR for this module's daemon, killed at the end if still there."""
    folder = tmp_path_factory.mktemp("run")
    folder.chmod(0o700)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("XDG_RUNTIME_DIR", str(folder))
        yield folder
    for status_file in (folder / "lowerd").glob("*.json"):
        pid = json.loads(status_file.read_text())["pid"]
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_through_the_daemon_a_model_that_prints_leaves_one_json_document(
    runtime: Path, tmp_path: Path
) -> None:
    root = copy_project(PROJECTS / "crashy", tmp_path / "crashy")
    cache = tmp_path / "cache"
    try:
        run = lowerd(root, cache, "build", "--daemon", "--json", "chatty")
    finally:
        lowerd(root, cache, "daemon", "stop")
    assert run.returncode == 0, run.log
    [target] = run.json()["targets"]
    assert target["status"] == "ok", run.log
    assert not any(line in run.stdout for line in CHATTER), run.log


# torch's own account of an export failure ------------------------------------------------------


def test_lowerd_log_level_debug_shows_torch_s_account_of_the_failure(
    broken_debug_build: SharedBuild,
) -> None:
    """broken/'s `build --json` at LOWERD_LOG_LEVEL=DEBUG (conftest.py's broken_debug_build, whose
    document tests/test_cli.py reads: one run, not two paying the torch and ExecuTorch imports)."""
    run = broken_debug_build.run
    assert run.returncode == 1, run.log
    assert "the graph torch.export traced before it failed" in run.stderr, run.log
    assert PARTIAL_GRAPH in run.stderr, run.log
    assert "DEBUG torch.fx.experimental.symbolic_shapes" in run.stderr, run.log
