"""The daemon under clumsy and hostile input, on real processes, sockets and files: links and
FIFOs planted in the runtime folder, malformed requests on its socket, a runtime folder it must
refuse, and a daemon or editor stopped while its fork server still warms up.

Every daemon here runs in a temporary runtime folder ($XDG_RUNTIME_DIR) with a temporary blob
cache; most are stopped before their fork server has imported torch. One daemon (`served`) warms
up and builds one small target; one in-process build shows the fallback. Nothing here measures
time: waits are on a condition, with the one deadline of tests/helpers.py.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lowerd.daemon.client_slots import MAX_REQUESTS_PER_CLIENT
from lowerd.daemon.runtime import (
    DaemonPaths,
    DaemonStatus,
    InstanceLock,
    RuntimeDirError,
    new_status,
    process_alive,
    read_status,
    remove_files,
    write_status,
)
from lowerd.project.config import load_config
from lowerd.worker.frames import encode_frame, read_frame

from helpers import (
    DEADLINE,
    ONE_TARGET,
    PROJECTS,
    RUN_DEADLINE,
    TRACEBACK,
    copy_project,
    lowerd,
    lowerd_env,
    lowerd_without_torch,
    wait_until,
)

pytestmark = pytest.mark.e2e

FORK_SERVER = "lowerd.worker.forkserver"
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)  # in /proc/<pid>/status's signal masks
PF_EXITING = 0x4  # <linux/sched.h>: in /proc/<pid>/stat's flags while the process exits


# Fixtures and helpers --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


def one_target_project(folder: Path) -> Path:
    root = copy_project(PROJECTS / "basic", folder / "basic")
    (root / "pyproject.toml").write_text(ONE_TARGET)
    return root


@pytest.fixture
def project(runtime: Path, tmp_path: Path) -> Path:
    return one_target_project(tmp_path)


def daemon_of(root: Path) -> DaemonStatus | None:
    return read_status(DaemonPaths.for_root(root))


def parent_of(pid: int) -> int | None:
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat_line.rpartition(")")[2].split()[1])  # after the name: state, ppid


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def fork_servers_of(parent: int) -> list[int]:
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return [pid for pid in pids if parent_of(pid) == parent and FORK_SERVER in command_line(pid)]


def warming_fork_server(parent: int) -> int:
    """The fork server `parent` started: it warms up (imports torch) for seconds from then."""
    [pid] = wait_until(lambda: fork_servers_of(parent), what=f"the fork server of {parent}")
    return pid


def killed(pid: int) -> bool:
    """Whether pid is dying: a SIGKILL is on its way to it, or it took one and is exiting (which
    takes a while for a process that mapped torch, on a busy machine)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat_fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return True
    if int(stat_fields[6]) & PF_EXITING:  # after the name: state, ppid, ..., flags
        return True
    masks = (line.split()[1] for line in status.splitlines() if line[:6] in ("SigPnd", "ShdPnd"))
    return any(int(mask, 16) & SIGKILL_BIT for mask in masks)


def has_torch(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def fate(pid: int, parent: int) -> str | None:
    """None while pid still runs as parent's child; then "gone" (or dying of a SIGKILL), or
    "orphaned": warming up (torch loaded) without the process that was to stop it.

    An orphan without torch is still starting: its parent died before it set its parent-death
    signal, and it leaves as soon as it checks its parent, before it imports anything heavy
    (on a busy machine Python's own start-up can take longer than the test's kill)."""
    if not process_alive(pid) or killed(pid):
        return "gone"
    if parent_of(pid) == parent or not has_torch(pid):
        return None
    return "orphaned"


def assert_ended_with(fork_server: int, parent: int) -> None:
    """The fork server went with its parent, and never ran on as another process's child."""
    try:
        ended = wait_until(lambda: fate(fork_server, parent), what="the fork server's end")
        # Reparenting and a parent-death signal are one step in the kernel, but /proc may show
        # the first a moment before the second: look again before calling it an orphan.
        if ended == "orphaned":
            ended = fate(fork_server, parent) or "gone"
        assert ended == "gone", (
            f"fork server {fork_server} outlived {parent}: now a child of {parent_of(fork_server)}"
        )
    finally:
        kill_fork_server(fork_server)


def kill_fork_server(pid: int | None) -> None:
    """A fork server a failed test left running: killed, not left to finish warming up."""
    if pid and process_alive(pid) and FORK_SERVER in command_line(pid):
        os.kill(pid, signal.SIGKILL)


def exchange(root: Path, data: bytes) -> dict[str, Any] | None:
    """Send raw bytes to the project's daemon; its first answer that is not progress, or None if
    it closed the connection without one."""
    status = daemon_of(root)
    assert status is not None, f"no daemon serves {root}"
    with socket.socket(socket.AF_UNIX) as connection:
        connection.settimeout(RUN_DEADLINE)
        connection.connect(status.socket)
        connection.sendall(data)
        with connection.makefile("rb") as replies:
            while (frame := read_frame(replies)) is not None:
                if frame.get("type") != "progress":
                    return frame
    return None


# Runtime files: never a link's target, never a FIFO ---------------------------------------------


@pytest.mark.parametrize("name", ["log", "lock"])
def test_a_link_planted_at_a_runtime_file_is_not_followed(
    name: str, project: Path, cache: Path, tmp_path: Path
) -> None:
    planted = getattr(DaemonPaths.for_root(project), name)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    planted.symlink_to(outside)
    run = lowerd_without_torch(project, cache, "daemon", "start")
    assert run.returncode == 2, run.log
    assert f"{planted} is a symbolic link, not a file lowerd made there" in run.stderr, run.log
    assert TRACEBACK not in run.stderr, run.log
    assert outside.read_text() == "precious\n"
    assert daemon_of(project) is None


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_runtime_file_that_is_not_a_file_is_refused(
    kind: str, runtime: Path, tmp_path: Path
) -> None:
    """A FIFO would block the log's open for good; neither is written or locked."""
    paths = DaemonPaths.for_root(tmp_path)  # any root: its key names the files
    for path in (paths.lock, paths.log):
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
    described = {"fifo": "a FIFO", "folder": "a folder"}[kind]
    with pytest.raises(RuntimeDirError, match=f"{paths.lock} is {described}"):
        InstanceLock(paths).acquire()
    with pytest.raises(RuntimeDirError, match=f"{paths.log} is {described}"):
        paths.open_log()


def test_a_status_file_that_is_a_fifo_is_neither_waited_on_nor_removed(
    runtime: Path, tmp_path: Path
) -> None:
    """A closing daemon reads the status file to see that it is still its own: a FIFO there
    blocked the read (and the daemon's exit) for good."""
    paths = DaemonPaths.for_root(tmp_path)
    os.mkfifo(paths.status)
    try:
        closing = threading.Thread(target=remove_files, args=(paths, os.getpid()), daemon=True)
        closing.start()
        closing.join(DEADLINE)  # a guard against the hang, not a measure
        assert not closing.is_alive(), "remove_files waits on the FIFO"
        assert read_status(paths) is None
        assert paths.status.exists()  # not a file lowerd wrote: left alone
    finally:
        paths.status.unlink()  # the module's runtime folder is shared


# Malformed requests: an error frame naming the field, and the daemon goes on ------------------


@pytest.fixture(scope="module")
def served(runtime: Path, cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = one_target_project(tmp_path_factory.mktemp("served"))
    run = lowerd(root, cache, "daemon", "start")
    assert run.returncode == 0 and "serves" in run.stdout, run.log
    yield root
    run = lowerd(root, cache, "daemon", "stop")
    assert run.returncode == 0, run.log


def _build(root: Path, **fields: Any) -> bytes:
    return encode_frame({"op": "build", **fields})


MALFORMED: dict[str, tuple[Callable[[Path], bytes], str]] = {
    "targets-5": (
        lambda root: _build(root, config=f"{root}/pyproject.toml", targets=5),
        "targets:",
    ),
    "jobs-x": (lambda root: _build(root, config=f"{root}/pyproject.toml", jobs="x"), "jobs:"),
    "no-config": (lambda root: _build(root, targets=["tiny_linear"]), "config: missing"),
    "target-7": (
        lambda root: _build(root, config=f"{root}/pyproject.toml", targets=["tiny_linear", 7]),
        "targets[1]:",
    ),
    "not-a-map": (lambda root: encode_frame([1, 2]), "not a map"),  # type: ignore[arg-type]
    "not-msgpack": (lambda root: b"\x00\x00\x00\x02\xc1\xc1", "undecodable"),
    "huge-length": (lambda root: b"\xde\xad\xbe\xefgarbage", "exceeds"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_request_gets_an_error_frame(served: Path, case: str) -> None:
    make, named = MALFORMED[case]
    reply = exchange(served, make(served))
    assert reply is not None, "the daemon closed the connection without an answer"
    assert reply["type"] == "error" and named in reply["message"], reply


def test_the_daemon_outlives_malformed_requests_and_builds(served: Path) -> None:
    before = daemon_of(served)
    for make, _ in MALFORMED.values():
        exchange(served, make(served))
    request = {"op": "build", "config": str(served / "pyproject.toml"), "targets": ["tiny_linear"]}
    final = exchange(served, encode_frame(request))
    assert final is not None and final["type"] == "final", final
    assert final["outcome"] == "ok", final
    assert [t["status"] for t in final["document"]["targets"]] == ["ok"]
    after = daemon_of(served)
    assert after is not None and after.pid == before.pid
    log = Path(after.log).read_text()
    assert TRACEBACK not in log, log
    assert log.count("refused a malformed request") >= len(MALFORMED), log


def connected(root: Path) -> socket.socket:
    status = daemon_of(root)
    assert status is not None, f"no daemon serves {root}"
    connection = socket.socket(socket.AF_UNIX)
    connection.settimeout(RUN_DEADLINE)
    connection.connect(status.socket)
    return connection


def final_frame(connection: socket.socket) -> dict[str, Any] | None:
    with connection.makefile("rb") as replies:
        while (frame := read_frame(replies)) is not None:
            if frame.get("type") != "progress":
                return frame
    return None


def test_build_requests_whose_config_is_a_fifo_are_refused_and_builds_go_on(
    served: Path, cache: Path, tmp_path: Path
) -> None:
    """Eight requests naming a FIFO as their config each took a thread of the daemon for good
    (the read waited for a writer), and a normal `lowerd build` then hung."""
    fifo = tmp_path / "pyproject.toml"
    os.mkfifo(fifo)
    requests = [connected(served) for _ in range(8)]
    for connection in requests:
        connection.sendall(encode_frame({"op": "build", "config": str(fifo), "targets": []}))
    run = lowerd(served, cache, "build", "--json")
    assert run.returncode == 0, run.log
    assert [t["status"] for t in json.loads(run.stdout)["targets"]] == ["ok"]
    for connection in requests:
        with connection:
            final = final_frame(connection)
        assert final is not None and final["outcome"] == "usage", final
        assert final["message"] == f"{fifo}: cannot read: a FIFO, not a regular file", final


def test_a_client_past_its_limit_of_requests_waits_for_its_own(served: Path) -> None:
    """Connections that have not sent their request yet are in flight too: the next request of
    the same process is answered once one of them ends."""
    status = daemon_of(served)
    assert status is not None
    log = Path(status.log)
    said = f"client pid {os.getpid()} has {MAX_REQUESTS_PER_CLIENT} requests in flight"
    before = log.read_text().count(said)
    idle = [connected(served) for _ in range(MAX_REQUESTS_PER_CLIENT)]
    with connected(served) as waiting:
        waiting.sendall(encode_frame({"op": "status"}))
        wait_until(lambda: log.read_text().count(said) > before, what="the wait's log line")
        idle.pop().close()
        reply = final_frame(waiting)
    assert reply is not None and reply["type"] == "status", reply
    for connection in idle:
        connection.close()


def test_the_client_prints_a_refusal_and_exits_2(
    project: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that refuses a build (here a listener holding the project's lock and socket, as a
    daemon does, answering with the daemon's error frame): the client says why and exits 2."""
    monkeypatch.setenv("LOWERD_CACHE_DIR", str(cache))  # the scope the client computes
    paths = DaemonPaths.for_root(project)
    lock = InstanceLock(paths)
    assert lock.acquire()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(paths.socket))
    listener.listen()
    listener.settimeout(DEADLINE)
    refusal = {"type": "error", "message": "jobs: expected an integer of at least 1, got int 0"}

    def refuse_one() -> None:
        connection, _ = listener.accept()
        with connection, connection.makefile("rb") as requests:
            read_frame(requests)
            connection.sendall(encode_frame(refusal))

    refuser = threading.Thread(target=refuse_one, daemon=True)
    refuser.start()
    try:
        write_status(paths, new_status(paths, load_config(project / "pyproject.toml"), "headless"))
        run = lowerd_without_torch(project, cache, "build", "--json")
    finally:
        refuser.join(DEADLINE)
        listener.close()
        remove_files(paths, os.getpid())
        lock.release()
    assert run.returncode == 2, run.log
    assert f"lowerd: daemon refused the request: {refusal['message']}" in run.stderr, run.log
    assert run.stdout == "" and TRACEBACK not in run.stderr, run.log


# A refused runtime folder: said on stderr, the build done in-process ---------------------------


def test_a_refused_runtime_folder_is_said_and_the_build_done_here(
    project: Path, cache: Path, tmp_path: Path
) -> None:
    loose = tmp_path / "loose"
    (loose / "lowerd").mkdir(parents=True)
    (loose / "lowerd").chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "lowerd", "build", "--json"],
        cwd=project,
        env=dict(lowerd_env(cache), XDG_RUNTIME_DIR=str(loose)),
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = (
        f"lowerd: not using a daemon: {loose / 'lowerd'} has mode 0o755; lowerd needs 0o700; "
        "building in this process"
    )
    assert said in done.stderr.splitlines(), done.stderr
    document = json.loads(done.stdout)  # stdout is still the one JSON document
    assert [t["status"] for t in document["targets"]] == ["ok"], document


# A fork server still warming up goes with its daemon -------------------------------------------


def started_daemon(project: Path, cache: Path) -> tuple[int, int]:
    """`lowerd daemon start`: the daemon's pid and its fork server's, still warming up."""
    run = lowerd_without_torch(project, cache, "daemon", "start")
    assert run.returncode == 0, run.log
    daemon = daemon_of(project)
    assert daemon is not None
    return daemon.pid, warming_fork_server(daemon.pid)


def test_daemon_stop_right_after_start_takes_the_fork_server(project: Path, cache: Path) -> None:
    daemon, fork_server = started_daemon(project, cache)
    run = lowerd_without_torch(project, cache, "daemon", "stop")
    assert run.returncode == 0 and f"stopped daemon {daemon}" in run.stdout, run.log
    assert not process_alive(daemon)
    assert_ended_with(fork_server, daemon)


def test_a_killed_daemon_takes_its_warming_fork_server(project: Path, cache: Path) -> None:
    """No close runs in a daemon killed by SIGKILL: the kernel's parent-death signal stops it."""
    daemon, fork_server = started_daemon(project, cache)
    os.kill(daemon, signal.SIGKILL)
    wait_until(lambda: not process_alive(daemon), what="the killed daemon's end")
    assert_ended_with(fork_server, daemon)


class Editor:
    """`lowerd serve` driven as an editor drives it; its replies are read on a thread, so that it
    never blocks on a full pipe."""

    def __init__(self, root: Path, cache: Path):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lowerd", "serve"],
            cwd=root,
            env=lowerd_env(cache),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        self.process.stdin.flush()

    def reply(self, request_id: int) -> dict[str, Any]:
        while True:
            message = self.replies.get(timeout=DEADLINE)
            if message.get("id") == request_id and "method" not in message:
                return message

    def _read(self) -> None:
        stream = self.process.stdout
        while header := stream.readline():
            length = 0
            while header.strip():
                name, _, value = header.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
                header = stream.readline()
            self.replies.put(json.loads(stream.read(length)))


def test_an_editor_shut_down_while_warming_takes_its_fork_server(
    project: Path, cache: Path
) -> None:
    editor = Editor(project, cache)
    server, fork_server = editor.process.pid, None
    try:
        initialize = {"processId": os.getpid(), "rootUri": project.as_uri(), "capabilities": {}}
        editor.send({"id": 1, "method": "initialize", "params": initialize})
        editor.send({"method": "initialized", "params": {}})
        fork_server = warming_fork_server(server)
        editor.send({"id": 2, "method": "shutdown"})
        assert "error" not in editor.reply(2)
        # Its answer to `shutdown` comes once it has stopped its fork server, before any `exit`.
        assert fate(fork_server, server) == "gone", f"fork server {fork_server} runs on"
        editor.send({"method": "exit"})
        assert editor.process.wait(timeout=DEADLINE) == 0
        assert_ended_with(fork_server, server)
    finally:
        if editor.process.poll() is None:
            editor.process.kill()
            editor.process.wait()
        kill_fork_server(fork_server)
    assert daemon_of(project) is None
