"""`lowerd build` as a client of the project's daemon: real processes on a real private socket.

Every daemon here runs in a temporary runtime folder ($XDG_RUNTIME_DIR) with a temporary blob
cache ($LOWERD_CACHE_DIR), on copies of tests/projects. A daemon's fork server imports torch
once (several seconds of CPU), so the daemons are few and module-scoped:

- `served`, a basic/ copy whose daemon is started with `lowerd daemon start`: the round trip
  against an in-process build (the session's, conftest.py's basic_build), modes, another uid,
  two clients at once;
- `autostarted`, a basic/ copy built with `--daemon`: autostart, then kill -9 mid-build and
  recovery;
- `crashy`, whose `hangs` target never ends: Ctrl-C and a dropped connection cancel it;
- `editor`, an editor's `lowerd serve`, which CLI clients use as their daemon.

Nothing here measures time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowerd.daemon.runtime import (
    DaemonPaths,
    InstanceLock,
    new_status,
    process_alive,
    remove_files,
    write_status,
)
from lowerd.project.config import load_config
from lowerd.worker.frames import encode_frame, read_frame

from helpers import (
    DEADLINE,
    PROJECTS,
    RUN_DEADLINE,
    TRACEBACK,
    Run,
    SharedBuild,
    daemon_of,
    interruptible,
    lowerd,
    lowerd_env,
    lowerd_without_torch,
    shas,
    wait_until,
    without_timing,
)
from testkit.projects import copy_project, write_text_atomic

pytestmark = pytest.mark.e2e

TARGETS = ["refused", "pkg"]  # a refused op with its line, and a module-path entry: small
BASIC_TARGETS = ["tiny_linear", "refused", "two_methods", "dynamic", "pkg"]
UNBUILDABLE_UID = 65534  # nobody


# Helpers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def start_client(cwd: Path, cache: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lowerd", *args],
        cwd=cwd,
        env=lowerd_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )


def finished(client: subprocess.Popen) -> Run:
    stdout, stderr = client.communicate(timeout=RUN_DEADLINE)
    return Run(client.args[3:], client.returncode, stdout, stderr)


def ask(root: Path, request: dict[str, Any]) -> dict[str, Any]:
    status = daemon_of(root)
    assert status is not None, f"no daemon serves {root}"
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(status.socket)
        connection.sendall(encode_frame(request))
        with connection.makefile("rb") as replies:
            while (frame := read_frame(replies)) is not None:
                if frame["type"] != "progress":
                    return frame
    raise AssertionError("the daemon closed the connection without an answer")


def running_builds(root: Path) -> list[dict[str, Any]]:
    return ask(root, {"op": "status"})["builds"]


def stop(root: Path, cache: Path) -> None:
    run = lowerd(root, cache, "daemon", "stop")
    assert run.returncode == 0, run.log


def assert_ok(run: Run, names: list[str]) -> dict[str, Any]:
    assert run.returncode == 0, run.log
    assert TRACEBACK not in run.stderr, run.log
    document = run.json()
    assert [t["name"] for t in document["targets"]] == names
    assert {t["status"] for t in document["targets"]} == {"ok"}, run.log
    return document


def relative(document: dict[str, Any], root: Path) -> dict[str, Any]:
    """The document with the project's folder taken out of its paths, to compare two copies."""
    return json.loads(json.dumps(without_timing(document)).replace(str(root), "<root>"))


# served/: a daemon started with `lowerd daemon start` -----------------------------------------


@pytest.fixture(scope="module")
def served(runtime: Path, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = copy_project(PROJECTS / "basic", tmp_path_factory.mktemp("served") / "basic")
    run = lowerd(root, cache, "daemon", "start")
    assert run.returncode == 0 and "serves" in run.stdout, run.log
    yield root
    stop(root, cache)


@pytest.fixture(scope="module")
def in_process(basic_build: SharedBuild) -> tuple[Path, dict[str, Any]]:
    """The reference: the same targets built in-process, on their own copy and cold cache (every
    target of basic/, built once per session by conftest.py's basic_build), its document with
    only TARGETS."""
    document = assert_ok(basic_build.run, BASIC_TARGETS)
    document["targets"] = [t for t in document["targets"] if t["name"] in TARGETS]
    assert [t["name"] for t in document["targets"]] == TARGETS
    return basic_build.root, document


@pytest.fixture(scope="module")
def through_daemon(served: Path, cache: Path) -> Run:
    return lowerd(served, cache, "build", "--json", *TARGETS)


def test_build_through_the_daemon_prints_the_in_process_document(
    served: Path, through_daemon: Run, in_process: tuple[Path, dict[str, Any]]
) -> None:
    reference_root, reference = in_process
    document = assert_ok(through_daemon, TARGETS)
    assert relative(document, served) == relative(reference, reference_root)
    for target in document["targets"]:
        assert target["reused"] is None and target["cache"]["misses"] > 0, target
    status = ask(served, {"op": "status"})
    assert status["builds"] == []
    # Each worker told its peak RSS, which decides when a next build of its target may start.
    peaks = {p["target"]: p["bytes"] for p in status["peaks"]}
    assert set(peaks) == set(TARGETS) and all(2**20 < b < 2**40 for b in peaks.values()), peaks


def test_the_readable_report_is_the_same_through_the_daemon(
    served: Path, cache: Path, through_daemon: Run
) -> None:
    daemon_run = lowerd(served, cache, "build", *TARGETS)
    local_run = lowerd_without_torch(served, cache, "build", "--no-daemon", *TARGETS)
    for run in (daemon_run, local_run):
        assert run.returncode == 0, run.log
    # The summary line carries a time; every line above it must agree.
    assert daemon_run.stdout.splitlines()[:-1] == local_run.stdout.splitlines()[:-1]
    assert "up to date" in daemon_run.stdout


def test_an_unchanged_rebuild_is_answered_by_the_daemon_without_torch(
    served: Path, cache: Path, through_daemon: Run
) -> None:
    run = lowerd_without_torch(served, cache, "build", "--json", *TARGETS)
    document = assert_ok(run, TARGETS)
    assert {t["reused"] for t in document["targets"]} == {"up-to-date"}
    assert shas(document) == shas(through_daemon.json())


def test_a_config_error_exits_2_through_the_daemon_too(served: Path, cache: Path) -> None:
    run = lowerd_without_torch(served, cache, "build", "no_such_target")
    assert run.returncode == 2 and "unknown target 'no_such_target'" in run.stderr, run.log


def test_daemon_files_are_private(served: Path, runtime: Path) -> None:
    paths = DaemonPaths.for_root(served)
    assert paths.folder == runtime / "lowerd"
    modes = {p: stat.S_IMODE(os.lstat(p).st_mode) for p in (paths.folder, paths.socket)}
    assert modes == {paths.folder: 0o700, paths.socket: 0o600}
    assert stat.S_ISSOCK(os.lstat(paths.socket).st_mode)
    assert stat.S_IMODE(paths.status.stat().st_mode) == 0o600
    status = daemon_of(served)
    assert status.socket == str(paths.socket) and status.root == str(served)
    assert process_alive(status.pid) and status.kind == "headless"


def test_status_names_the_daemon(served: Path, cache: Path) -> None:
    run = lowerd_without_torch(served, cache, "daemon", "status")
    assert run.returncode == 0, run.log
    assert f"daemon {daemon_of(served).pid} serves {served}" in run.stdout
    assert re.search(r"^  refused: last build peaked at \d+ MiB RSS$", run.stdout, re.M), run.log


def test_the_daemon_process_never_loads_torch(served: Path, through_daemon: Run) -> None:
    """It built (through_daemon), in its fork server's workers: torch and ExecuTorch are mapped
    there, never in the headless daemon itself (as test_server checks of `lowerd serve`)."""
    assert through_daemon.returncode == 0, through_daemon.log
    status = daemon_of(served)
    assert status is not None
    maps = Path(f"/proc/{status.pid}/maps").read_text()
    assert "torch" not in maps and "executorch" not in maps
    # The check can see torch: the daemon's child, the fork server, has it loaded.
    children = Path(f"/proc/{status.pid}/task/{status.pid}/children").read_text().split()
    assert any("libtorch" in Path(f"/proc/{pid}/maps").read_text() for pid in children)


def _connect_as(uid: int, socket_path: Path) -> dict[str, Any] | str:
    """Ask for the status from a forked child running as `uid`: the reply, or the name of the
    error the connection failed with.

    The child enters the socket's folder before it drops root, so that only that folder's and
    the socket's modes stand between it and the daemon, not those of pytest's temp folders.
    """
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        outcome: Any
        try:
            os.chdir(socket_path.parent)
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX) as connection:
                connection.connect(socket_path.name)
                connection.sendall(encode_frame({"op": "status"}))
                with connection.makefile("rb") as replies:
                    outcome = read_frame(replies) or "closed"
        except OSError as error:
            outcome = type(error).__name__
        os.write(write_end, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        outcome = json.loads(pipe.read())
    os.waitpid(pid, 0)
    return outcome


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another uid needs root")
def test_another_user_is_refused(served: Path) -> None:
    paths = DaemonPaths.for_root(served)
    # The private folder keeps another user from the socket at all.
    assert _connect_as(UNBUILDABLE_UID, paths.socket) == "PermissionError"
    # Were both opened up by mistake, the daemon still checks the peer's uid and refuses it.
    paths.folder.chmod(0o711)
    paths.socket.chmod(0o666)
    try:
        refused = _connect_as(UNBUILDABLE_UID, paths.socket)
    finally:
        paths.folder.chmod(0o700)
        paths.socket.chmod(0o600)
    assert isinstance(refused, dict), refused
    assert refused["type"] == "error" and f"uid {UNBUILDABLE_UID}" in refused["message"]
    assert ask(served, {"op": "status"})["type"] == "status"  # and it goes on serving


def test_two_clients_at_once_get_the_same_bytes(
    served: Path, cache: Path, through_daemon: Run
) -> None:
    shutil.rmtree(served / "build")
    clients = [start_client(served, cache, "build", "--json", *TARGETS) for _ in range(2)]
    documents = [assert_ok(finished(client), TARGETS) for client in clients]
    for document in documents:
        assert shas(document) == shas(through_daemon.json())
    # They took turns on each target: whoever came second found it built.
    for name in TARGETS:
        reused = sorted(str(d["targets"][TARGETS.index(name)]["reused"]) for d in documents)
        assert reused in (["None", "up-to-date"], ["None", "None"]), reused


def test_an_insecure_runtime_folder_is_refused(tmp_path: Path, served: Path) -> None:
    loose = tmp_path / "loose"
    (loose / "lowerd").mkdir(parents=True)
    (loose / "lowerd").chmod(0o755)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(loose))
    done = subprocess.run(
        [sys.executable, "-m", "lowerd", "daemon", "start"],
        cwd=served,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "has mode 0o755; lowerd needs 0o700" in done.stderr
    assert list((loose / "lowerd").iterdir()) == []


# Without a running daemon ------------------------------------------------------------------------


def fake_status(root: Path, pid: int) -> DaemonPaths:
    """A status file as a daemon of this pid would have left it, and its socket file."""
    paths = DaemonPaths.for_root(root)
    paths.socket.touch(mode=0o600)
    status = {
        "pid": pid,
        "socket": str(paths.socket),
        "root": str(root),
        "kind": "headless",
        "version": "0.1.0",
        "tool_versions": [],
        "scope": "",
        "started": 0.0,
        "log": None,
    }
    paths.status.write_text(json.dumps(status))
    paths.status.chmod(0o600)
    return paths


def test_a_stale_status_file_is_cleaned_up(runtime: Path, cache: Path, tmp_path: Path) -> None:
    root = copy_project(PROJECTS / "basic", tmp_path / "basic")
    dead = subprocess.Popen(["true"])
    dead.wait()
    paths = fake_status(root, dead.pid)
    run = lowerd_without_torch(root, cache, "daemon", "status")
    assert run.returncode == 1 and f"no daemon serves {root}" in run.stdout, run.log
    assert not paths.status.exists() and not paths.socket.exists()


def test_a_live_pid_without_the_lock_is_stale(runtime: Path, cache: Path, tmp_path: Path) -> None:
    """The dead daemon's pid now belongs to another process, which does not hold the lock."""
    root = copy_project(PROJECTS / "basic", tmp_path / "basic")
    paths = fake_status(root, os.getpid())
    run = lowerd_without_torch(root, cache, "daemon", "status")
    assert run.returncode == 1 and f"no daemon serves {root}" in run.stdout, run.log
    assert not paths.status.exists() and not paths.socket.exists()


def test_a_daemon_that_does_not_answer_is_reported(
    runtime: Path, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lock is held and its status current, but its socket is gone: --daemon says so."""
    root = copy_project(PROJECTS / "basic", tmp_path / "basic")
    monkeypatch.setenv("LOWERD_CACHE_DIR", str(cache))  # the scope the client computes
    paths = DaemonPaths.for_root(root)
    lock = InstanceLock(paths)
    assert lock.acquire()
    try:
        config = load_config(root / "pyproject.toml")
        write_status(paths, new_status(paths, config, "headless"))
        run = lowerd_without_torch(root, cache, "build", "--daemon")
    finally:
        remove_files(paths, os.getpid())
        lock.release()
    assert run.returncode == 2, run.log
    assert "cannot reach the daemon" in run.stderr and "lowerd daemon restart" in run.stderr


@pytest.fixture(scope="module")
def autostarted(runtime: Path, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_project(PROJECTS / "basic", tmp_path_factory.mktemp("autostart") / "basic")
    assert daemon_of(root) is None
    return root


@pytest.fixture(scope="module")
def autostart_run(autostarted: Path, cache: Path) -> Iterator[Run]:
    yield lowerd(autostarted, cache, "build", "--json", "--daemon", *TARGETS)
    if daemon_of(autostarted):
        stop(autostarted, cache)


def test_daemon_flag_starts_a_daemon_and_builds_through_it(
    autostarted: Path, autostart_run: Run, in_process: tuple[Path, dict[str, Any]]
) -> None:
    document = assert_ok(autostart_run, TARGETS)
    assert shas(document) == shas(in_process[1])
    status = daemon_of(autostarted)
    assert status is not None and process_alive(status.pid)
    assert status.root == str(autostarted)


def test_kill_9_mid_build_then_the_next_build_recovers(
    autostarted: Path, autostart_run: Run, cache: Path
) -> None:
    expected = shas(autostart_run.json())
    daemon = daemon_of(autostarted)
    shutil.rmtree(autostarted / "build")
    client = start_client(autostarted, cache, "build", "--json", *TARGETS)
    builds = wait_until(
        lambda: [b for b in running_builds(autostarted) if b["pid"]], what="a build"
    )
    os.kill(daemon.pid, signal.SIGKILL)
    interrupted = finished(client)
    assert interrupted.returncode == 1, interrupted.log
    assert "went away" in interrupted.stderr and TRACEBACK not in interrupted.stderr
    # The fork server saw its daemon go and took the worker with it.
    workers = [build["pid"] for build in builds]
    wait_until(lambda: not any(map(process_alive, workers)), what="the orphaned workers to end")

    recovered = lowerd(autostarted, cache, "build", "--json", "--daemon", *TARGETS)
    assert shas(assert_ok(recovered, TARGETS)) == expected
    new_daemon = daemon_of(autostarted)
    assert new_daemon is not None and new_daemon.pid != daemon.pid
    for target in recovered.json()["targets"]:
        assert Path(target["output"]).is_file()


def test_a_changed_environment_restarts_the_daemon(
    autostarted: Path, cache: Path, tmp_path: Path
) -> None:
    before = daemon_of(autostarted)
    assert before is not None, "the tests before left no daemon serving autostarted/"
    run = lowerd_without_torch(autostarted, tmp_path / "another-cache", "daemon", "start")
    assert run.returncode == 0, run.log
    after = daemon_of(autostarted)
    assert after.pid != before.pid and not process_alive(before.pid)
    assert after.scope != before.scope
    stop(autostarted, tmp_path / "another-cache")
    assert daemon_of(autostarted) is None


# crashy/: cancelling ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crashy(runtime: Path, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = copy_project(PROJECTS / "crashy", tmp_path_factory.mktemp("crashy") / "crashy")
    run = lowerd(root, cache, "daemon", "start")
    assert run.returncode == 0, run.log
    yield root
    stop(root, cache)


def hanging_worker(root: Path) -> int:
    [build] = wait_until(
        lambda: [b for b in running_builds(root) if b["pid"]], what="the hanging build"
    )
    return build["pid"]


def _interrupt_client(root: Path, cache: Path) -> int:
    client = start_client(root, cache, "build", "hangs")
    worker = hanging_worker(root)
    client.send_signal(signal.SIGINT)
    run = finished(client)
    assert run.returncode == 130 and "interrupted" in run.stderr, run.log
    assert TRACEBACK not in run.stderr, run.log
    return worker


def _drop_connection(root: Path, cache: Path) -> int:
    request = {"op": "build", "config": str(root / "pyproject.toml"), "targets": ["hangs"]}
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(daemon_of(root).socket)
        connection.sendall(encode_frame(request))
        return hanging_worker(root)


@pytest.mark.parametrize("leave", [_interrupt_client, _drop_connection], ids=["ctrl-c", "drop"])
def test_a_client_that_leaves_cancels_its_build(
    crashy: Path, cache: Path, leave: Callable[[Path, Path], int]
) -> None:
    worker = leave(crashy, cache)
    wait_until(lambda: not process_alive(worker), what="the cancelled worker to end")
    wait_until(lambda: running_builds(crashy) == [], what="the daemon to forget the build")
    run = lowerd_without_torch(crashy, cache, "daemon", "status")
    assert run.returncode == 0 and "building" not in run.stdout, run.log


# An editor's `lowerd serve`: CLI clients share it ---------------------------------------------


def _lsp_message(payload: dict[str, Any]) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **payload}).encode()
    return f"Content-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture
def editor(runtime: Path, cache: Path, tmp_path: Path) -> Iterator[Path]:
    """`lowerd serve` on a one-target project, initialized as an editor would; its messages to
    the editor are read and dropped, so that it never blocks on a full pipe."""
    root = copy_project(PROJECTS / "basic", tmp_path / "basic")
    write_text_atomic(
        root / "pyproject.toml",
        '[tool.lowerd.targets.tiny_linear]\nentry = "models/tiny_linear.py:make"\n',
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "lowerd", "serve"],
        cwd=root,
        env=lowerd_env(cache),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    threading.Thread(target=server.stdout.read, daemon=True).start()
    initialize = {"processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {}}
    server.stdin.write(_lsp_message({"id": 1, "method": "initialize", "params": initialize}))
    server.stdin.write(_lsp_message({"method": "initialized", "params": {}}))
    server.stdin.flush()
    yield root
    server.stdin.write(_lsp_message({"id": 2, "method": "shutdown"}))
    server.stdin.write(_lsp_message({"method": "exit"}))
    server.stdin.close()
    server.wait(timeout=DEADLINE)
    assert daemon_of(root) is None  # the server took its socket and status file with it


def test_lowerd_build_shares_the_editors_server(editor: Path, cache: Path) -> None:
    status = wait_until(lambda: daemon_of(editor), what="the editor's server to open its socket")
    assert status.kind == "lsp"
    run = lowerd(editor, cache, "build", "--json")
    assert_ok(run, ["tiny_linear"])
    stop_run = lowerd_without_torch(editor, cache, "daemon", "stop")
    assert stop_run.returncode == 1 and "an editor's" in stop_run.stderr, stop_run.log
    assert daemon_of(editor).pid == status.pid
