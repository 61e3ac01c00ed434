"""`lowerd build --executor ray` against a real Ray cluster started here (private temp folder and
port, killed by its process group at the end; never `ray stop`, which ends every Ray of the user).

Every fresh Ray worker imports torch and ExecuTorch (seconds), and a Ray job's workers are its
own, so the expensive runs are few and module-scoped: one local `lowerd build --json` of five
targets, then one Ray build of the same five (build/ removed in between), then a local build
that must find them up to date without importing torch; then, for `lowerd explain`, one more Ray
build of one target after an edit. The five: basic's three, one whose entry raises (its
file:line must be the local one), and one whose entry kills its Ray worker the first time (the
task is retried and builds). Missing Ray and --daemon are checked without a cluster.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.daemon.runtime import process_alive
from lowerd.project.build_state import load_state
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.explain import explain_targets
from lowerd.project.wire import encode

from helpers import (
    DEADLINE,
    PROJECTS,
    RUN_DEADLINE,
    Run,
    copy_project,
    edit_refused_weights,
    interruptible,
    line_marks,
    lowerd,
    lowerd_env,
    lowerd_without_torch,
    shas,
    wait_until,
    without_timing,
)
from test_explain import edge_line
from testkit.ray_cluster import RayStartFailed, ray_cluster

pytestmark = pytest.mark.e2e

TARGETS = ["tiny_linear", "refused", "two_methods", "raises", "retried"]
MISSING = "lowerd: --executor ray needs Ray: pip install 'lowerd[ray]'\n"

RAISES = """\
def make():
    print("raises: about to fail")
    raise ValueError("no model today")  # LINE-MARK: raises.raise
"""

# Kills the Ray worker that runs its build (the fork's parent) once: the marker, outside the
# project, says it did. Built locally (no `ray` imported in the worker) it builds at once.
RETRIED = """\
import os
import signal
import sys
from pathlib import Path

import torch
from torch import nn

MARKER = Path({marker!r})


def make():
    if "ray" in sys.modules and not MARKER.exists():
        MARKER.touch()
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(1)
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 4)).eval(), (torch.randn(1, 4),)
"""


# Kills every Ray worker that runs its build: after the retry, a worker-crash at the entry.
ALWAYS_KILLED = """\
import os
import signal
import sys


def make():  # LINE-MARK: always_killed.make
    if "ray" in sys.modules:
        os.kill(os.getppid(), signal.SIGKILL)
    os._exit(1)
"""

# Says which process builds it, then waits to be cancelled.
WAITS = """\
import os
import threading
from pathlib import Path


def make():
    Path({pid_file!r}).write_text(str(os.getpid()))
    threading.Event().wait()
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A one-node Ray cluster (2 CPUs, no dashboard) in its own session; its address."""
    # A short folder: Ray's Unix sockets live under it, and their paths are capped at 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="lowerd-ray-", dir="/tmp"))
    try:
        with ray_cluster(temp, cpus=2) as address:
            yield address
    except RayStartFailed as error:
        pytest.fail(str(error))
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_project(PROJECTS / "basic", tmp_path_factory.mktemp("ray") / "project")
    marker = tmp_path_factory.mktemp("marker") / "killed-once"
    (root / "models" / "raises.py").write_text(RAISES)
    (root / "models" / "retried.py").write_text(RETRIED.format(marker=str(marker)))
    (root / "models" / "always_killed.py").write_text(ALWAYS_KILLED)
    (root / "models" / "waits.py").write_text(WAITS.format(pid_file=str(_pid_file(root))))
    with (root / "pyproject.toml").open("a") as config:
        config.write(
            textwrap.dedent("""
                [tool.lowerd.targets.raises]
                entry = "models/raises.py:make"

                [tool.lowerd.targets.retried]
                entry = "models/retried.py:make"

                [tool.lowerd.targets.always_killed]
                entry = "models/always_killed.py:make"

                [tool.lowerd.targets.waits]
                entry = "models/waits.py:make"
            """)
        )
    return root


@pytest.fixture(scope="module")
def local(project: Path, tmp_path_factory: pytest.TempPathFactory) -> Run:
    cache = tmp_path_factory.mktemp("local-cache")
    return lowerd(project, cache, "build", "--json", "--no-daemon", *TARGETS)


@pytest.fixture(scope="module")
def ray_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Ray builds' blob cache ($LOWERD_CACHE_DIR travels to the node, on this machine)."""
    return tmp_path_factory.mktemp("ray-cache")


@pytest.fixture(scope="module")
def on_ray(local: Run, project: Path, cluster: str, ray_cache: Path) -> Run:
    """The same build on Ray, from nothing (a fresh cache, no build/), as the local one was."""
    shutil.rmtree(project / "build")
    ray = ("--executor", "ray", "--ray-address", cluster)
    return lowerd(project, ray_cache, "build", "--json", *ray, *TARGETS, "always_killed")


def test_ray_build_equals_the_local_build(local: Run, on_ray: Run) -> None:
    assert local.returncode == on_ray.returncode == 1, on_ray.log  # `raises` fails, both ways
    ray_document = on_ray.json()
    ray_document["targets"] = [t for t in ray_document["targets"] if t["name"] in TARGETS]
    assert ray_document.pop("executor") == "ray"
    assert "executor" not in local.json()
    assert shas(ray_document) == shas(local.json())
    assert all(shas(ray_document)[name] for name in TARGETS if name != "raises")
    assert without_timing(ray_document) == without_timing(local.json())


def test_written_files_are_the_documents(on_ray: Run, project: Path) -> None:
    import hashlib

    for target in on_ray.json()["targets"]:
        if target["status"] == "ok":
            data = Path(target["output"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == target["sha256"]
            assert Path(target["output"]).parent == project / "build"


def test_a_failing_entry_is_blamed_at_its_line_and_prints_go_to_stderr(
    on_ray: Run, project: Path
) -> None:
    (raises,) = [t for t in on_ray.json()["targets"] if t["name"] == "raises"]
    file, line = line_marks(project)["raises.raise"]
    assert (raises["error"]["file"], raises["error"]["line"]) == (file, line), on_ray.log
    assert "no model today" in raises["error"]["message"]
    assert "raises: about to fail" in on_ray.stderr  # the user's print, as a local build shows


def test_a_task_whose_worker_was_killed_is_retried(on_ray: Run) -> None:
    (retried,) = [t for t in on_ray.json()["targets"] if t["name"] == "retried"]
    assert retried["status"] == "ok", on_ray.log


def test_a_task_killed_every_time_is_reported_at_the_entry(on_ray: Run, project: Path) -> None:
    (killed,) = [t for t in on_ray.json()["targets"] if t["name"] == "always_killed"]
    error = killed["error"]
    assert killed["status"] == "error" and error["kind"] == "worker-crash", on_ray.log
    assert (error["file"], error["line"]) == line_marks(project)["always_killed.make"]
    assert "the Ray worker building it died (2 tries)" in error["message"]


def test_only_lowerd_and_the_user_print_on_stderr(on_ray: Run) -> None:
    lines = [line for line in on_ray.stderr.splitlines() if line.strip()]
    assert lines == ["raises: about to fail"], on_ray.log


def test_the_next_local_build_is_up_to_date_without_torch(
    on_ray: Run, project: Path, tmp_path: Path
) -> None:
    built = [name for name in TARGETS if name != "raises"]
    run = lowerd_without_torch(project, tmp_path, "build", "--json", "--no-daemon", *built)
    assert run.returncode == 0, run.log
    assert {t["reused"] for t in run.json()["targets"]} == {"up-to-date"}, run.log
    config = load_config(project / "pyproject.toml")
    for name in built:  # the node's worker measured it: the next task's `memory`
        state = load_state(config, config.targets[name])
        assert state is not None and state.peak_rss and state.peak_rss > 0


def test_ctrl_c_cancels_the_tasks_and_their_builds(
    on_ray: Run, project: Path, cluster: str, tmp_path: Path
) -> None:
    pid_file = _pid_file(project)
    ray = ("--executor", "ray", "--ray-address", cluster)
    build = subprocess.Popen(
        [sys.executable, "-m", "lowerd", "build", *ray, "waits"],
        cwd=project,
        env=lowerd_env(tmp_path / "cache"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,  # Ctrl-C as in a terminal, however the tests were started
    )
    try:
        pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), what="the build"))
        build.send_signal(signal.SIGINT)
        stdout, stderr = build.communicate(timeout=DEADLINE)
    finally:
        build.kill()
    assert (build.returncode, stdout, stderr) == (130, "", "lowerd: interrupted\n")
    wait_until(lambda: not process_alive(pid), what="the cancelled build's fork to end")


def test_explain_says_what_a_local_build_would(
    on_ray: Run, project: Path, cluster: str, ray_cache: Path
) -> None:
    """The record a Ray build leaves is explained against this machine's earlier one (the task's
    copy had none), in a local build's words (tests/test_explain.py's weight edit)."""
    config = load_config(project / "pyproject.toml")
    assert _explain(config, "refused") == [
        "refused: no earlier build: lowered 2 partitions (0 from the cache)",
        edge_line(config, "refused"),
        "  up to date: nothing it read or wrote has changed since",
    ]
    edit_refused_weights(project)
    ray = ("--executor", "ray", "--ray-address", cluster)
    run = lowerd(project, ray_cache, "build", *ray, "refused")
    assert run.returncode == 0, run.log

    text = (project / "models" / "refused.py").read_text().splitlines()
    first = text.index("    model = Refused().eval()") + 1
    fc2 = line_marks(project)["refused.cumsum"][1] + 1  # return self.fc2(x)
    assert _explain(config, "refused") == [
        "refused: rebuilt 1 of 2 partitions (1 from the cache)",
        "  lowered because the exported program changed (forward)",
        f"  models/refused.py changed (lines {first}-{first + 3})",
        f"  XNNPACK #2 (forward, models/refused.py:{fc2}): the weights changed (fc2.bias)",
        edge_line(config, "refused"),
        "  up to date: nothing it read or wrote has changed since",
    ]
    [document] = encode(explain_targets(config, ["refused"]))["targets"]
    assert (document["partitions"][1]["previous"], document["inputs"]) == (2, [])


# Without a cluster ---------------------------------------------------------------------------


def _without_ray(tmp_path: Path) -> dict[str, str]:
    """An environment where `import ray` fails, as where the extra is not installed."""
    shadow = tmp_path / "no-ray"
    shadow.mkdir()
    (shadow / "ray.py").write_text("raise ImportError('No module named ray')\n")
    env = lowerd_env(tmp_path / "cache")
    env["PYTHONPATH"] = str(shadow)
    return env


def _run(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lowerd", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE,
        check=False,
    )


def test_missing_ray_is_one_clear_line(tmp_path: Path) -> None:
    project = copy_project(PROJECTS / "basic", tmp_path / "project")
    done = _run(project, _without_ray(tmp_path), "build", "--executor", "ray")
    assert (done.returncode, done.stdout, done.stderr) == (2, "", MISSING)


def test_missing_ray_names_the_config_key(tmp_path: Path) -> None:
    project = copy_project(PROJECTS / "basic", tmp_path / "project")
    config = project / "pyproject.toml"
    config.write_text(
        config.read_text().replace("[tool.lowerd]\n", '[tool.lowerd]\nexecutor = "ray"\n', 1)
    )
    done = _run(project, _without_ray(tmp_path), "build")
    expected = "lowerd: executor = \"ray\" needs Ray: pip install 'lowerd[ray]'\n"
    assert (done.returncode, done.stderr) == (2, expected)


def test_daemon_and_ray_are_refused(tmp_path: Path) -> None:
    project = copy_project(PROJECTS / "basic", tmp_path / "project")
    done = _run(project, lowerd_env(tmp_path / "cache"), "build", "--daemon", "--executor", "ray")
    assert done.returncode == 2
    assert done.stderr == "lowerd: --daemon and --executor ray: a Ray build uses no daemon\n"


def _explain(config: ProjectConfig, name: str) -> list[str]:
    [target] = encode(explain_targets(config, [name]))["targets"]
    lines: list[str] = target["lines"]
    return lines


def _pid_file(project: Path) -> Path:
    """Where `waits` writes its pid: outside the project, so not one of its inputs."""
    return project.parent / "waits.pid"
