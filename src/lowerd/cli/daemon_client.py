"""The client side of the project's daemon: `lowerd build` through it, and `lowerd daemon ...`.

Like `dmypy run`: find the project's daemon by its status file, restart it when it was started
by another lowerd, torch or executorch, or with other daemon-scoped options, and ask it over its
private socket. Nothing here imports torch, nor the daemon's own modules beyond the runtime
folder's: a build answered by a warm daemon costs the client a Python start and a round trip.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

from lowerd.cli.build_output import BuildAsk, progress_printer
from lowerd.cli.exit_codes import EXIT_OK, EXIT_TARGET_FAILED, EXIT_USAGE, exit_code
from lowerd.daemon.rpc_messages import (
    BuildCall,
    FinalFrame,
    ProgressFrame,
    Reply,
    Request,
    StatusCall,
    StatusFrame,
    StopCall,
    parse_reply,
)
from lowerd.daemon.runtime import (
    DaemonPaths,
    DaemonStatus,
    InstanceLock,
    RuntimeDirError,
    open_runtime_file,
    peer_uid,
    process_alive,
    read_status,
    remove_files,
)
from lowerd.project.config import (
    ProjectConfig,
    choose_config,
    load_config,
    select_targets,
)
from lowerd.project.wire import encode
from lowerd.worker.frames import FrameError, encode_frame, read_frame
from lowerd.worker.protocol import ProtocolError

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0
POLL_SECONDS = 0.02


class DaemonError(Exception):
    """The daemon could not be reached, started or stopped."""


class DaemonUnreachable(DaemonError):
    """Its status file names a live process, but nothing answers on its socket."""


class DaemonBypassed(DaemonError):
    """An editor's daemon serves the project but cannot serve this client; it is not ours to
    restart."""


def load_project(config_path: str | None) -> ProjectConfig:
    return load_config(choose_config(config_path))


# lowerd build ---------------------------------------------------------------------------------


def build_via_daemon(ask: BuildAsk, start: bool) -> int | None:
    """Build through the project's daemon: the running one, or with `start` a new one.

    None when there is no daemon to use: the caller builds in-process.
    """
    config = load_project(ask.config_path)
    select_targets(config, ask.target_names)  # a wrong name is a usage error before any daemon
    # Warm workers make a job cheap; in-process, each extra job pays its own torch import.
    jobs = ask.jobs or os.cpu_count() or 1
    request = BuildCall(str(config.path), ask.target_names, ask.use_cache, jobs)
    final = final_via_daemon(config, request, start)
    if not isinstance(final, FinalFrame):
        return final
    if final.document is None:
        print(f"lowerd: {final.message}", file=sys.stderr)
    else:
        ask.print_outcome(final.document)
    return exit_code(final.outcome)


def final_via_daemon(
    config: ProjectConfig, request: Request, start: bool
) -> FinalFrame | int | None:
    """Ask the project's daemon (the running one, or with `start` or `daemon = true` a new one)
    a build or a compare, showing its progress: its final frame; an exit code when it could not
    be asked; None when there is no daemon to use: the caller works in-process."""
    start = start or config.daemon
    try:
        status = _daemon_for(config, start)
    except DaemonBypassed as error:
        _in_process_instead(error)
        return None
    except (RuntimeDirError, DaemonError) as error:
        if not start:  # no usable daemon, none asked for: build in-process, as without one
            _in_process_instead(error)
            return None
        print(f"lowerd: {error}", file=sys.stderr)
        return EXIT_USAGE
    if status is None:
        return None  # none runs, none asked for: the plain in-process build, nothing to say
    progress = progress_printer()
    try:
        final = ask(status, request, _progress_shower(progress))
    except DaemonUnreachable as error:
        if not start:  # the request never left: building in-process loses nothing
            _in_process_instead(error)
            return None
        print(f"lowerd: {error}; try `lowerd daemon restart`", file=sys.stderr)
        return EXIT_USAGE
    except DaemonError as error:  # it went away mid-build
        print(f"lowerd: {error}", file=sys.stderr)
        return EXIT_TARGET_FAILED
    finally:
        if progress:
            progress.clear()
    if not isinstance(final, FinalFrame):
        message = getattr(final, "message", f"a {type(final).__name__} instead of a build's end")
        print(f"lowerd: daemon refused the request: {message}", file=sys.stderr)
        return EXIT_USAGE
    return final


def _in_process_instead(why: Exception) -> None:
    """Say why the daemon is passed over (on stderr: --json's stdout stays one document), and
    let the caller build in-process."""
    print(f"lowerd: not using a daemon: {why}; building in this process", file=sys.stderr)


def _progress_shower(progress: Callable[..., None] | None) -> Callable[[ProgressFrame], None]:
    def show(frame: ProgressFrame) -> None:
        if progress:
            progress(frame.stage, frame.target, frame.detail)

    return show


def _daemon_for(config: ProjectConfig, start: bool) -> DaemonStatus | None:
    """The daemon that can serve this config now: a stale one is replaced, as dmypy does."""
    paths = DaemonPaths.for_root(config.root)
    status = read_status(paths)
    if status is not None and (why := status.mismatch(config)):
        if status.kind != "headless":  # an editor's server is the editor's to restart
            raise DaemonBypassed(f"the editor's daemon {status.pid} is out of date ({why})")
        stop_daemon(paths, status)
        return start_daemon(paths, config)
    if status is None and start:
        return start_daemon(paths, config)
    return status


# The daemon's life -----------------------------------------------------------------------------


def start_daemon(paths: DaemonPaths, config: ProjectConfig) -> DaemonStatus:
    """Start the headless daemon and wait until its socket answers (its status file is there)."""
    command = [sys.executable, "-m", "lowerd.daemon.headless", "--config", str(config.path)]
    log = paths.open_log()
    try:
        starter = subprocess.run(
            [*command, "--detach"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=config.root,
            check=False,
        )
    finally:
        os.close(log)
    if starter.returncode != 0:
        raise DaemonError(f"the daemon did not start{_log_tail(paths)}")
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        status = read_status(paths)
        if status is not None:
            return status
        time.sleep(POLL_SECONDS)
    raise DaemonError(
        f"the daemon did not answer within {START_TIMEOUT_SECONDS:g} s{_log_tail(paths)}"
    )


def stop_daemon(paths: DaemonPaths, status: DaemonStatus) -> None:
    """Ask the daemon to stop and wait for it to be gone; kill it if it does not go."""
    try:
        ask(status, StopCall())
    except DaemonError:
        pass  # not answering: it is killed below
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while process_alive(status.pid) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    # Killed only while the project's lock is still held: the pid is then surely the daemon's.
    if process_alive(status.pid) and InstanceLock(paths).held():
        os.kill(status.pid, signal.SIGKILL)
        while process_alive(status.pid):
            time.sleep(POLL_SECONDS)
    remove_files(paths, status.pid)


def ask(
    status: DaemonStatus,
    request: Request,
    on_frame: Callable[[ProgressFrame], None] = lambda _: None,
) -> Reply:
    """Send one request; pass the streamed progress frames on; return the last reply (final,
    status, ...). A frame no daemon sends is a DaemonError.

    A KeyboardInterrupt closes the socket on its way out, which cancels the request's builds.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        try:
            connection.connect(status.socket)
        except OSError as error:
            message = f"cannot reach the daemon at {status.socket}: {error}"
            raise DaemonUnreachable(message) from None
        if peer_uid(connection) != os.geteuid():
            raise DaemonUnreachable(f"the socket {status.socket} is another user's")
        connection.sendall(encode_frame(encode(request)))
        with connection.makefile("rb") as replies:
            try:
                while (frame := read_frame(replies)) is not None:
                    reply = parse_reply(frame)
                    if not isinstance(reply, ProgressFrame):
                        return reply
                    on_frame(reply)
            except (FrameError, ProtocolError) as error:
                raise DaemonError(
                    f"the daemon (pid {status.pid}) answered garbage: {error}"
                ) from None
    raise DaemonError(
        f"the daemon (pid {status.pid}) went away before answering"
        + (f"; its log: {status.log}" if status.log else "")
    )


def _log_tail(paths: DaemonPaths, lines: int = 10) -> str:
    try:
        with os.fdopen(open_runtime_file(paths.log, os.O_RDONLY), errors="replace") as log:
            tail = log.read().splitlines()[-lines:]
    except (RuntimeDirError, OSError):
        return ""
    return f"; the end of its log ({paths.log}):\n" + "\n".join(tail) if tail else ""


# lowerd daemon start|stop|status|restart ------------------------------------------------------


def run_daemon_command(action: str, config_path: str | None) -> int:
    config = load_project(config_path)
    try:
        paths = DaemonPaths.for_root(config.root)
        return _DAEMON_ACTIONS[action](paths, config)
    except (RuntimeDirError, DaemonError) as error:
        print(f"lowerd: {error}", file=sys.stderr)
        return EXIT_USAGE


def _start(paths: DaemonPaths, config: ProjectConfig) -> int:
    try:
        status = _daemon_for(config, start=True)
    except DaemonBypassed as error:
        print(f"lowerd: {error}; close the editor's server first", file=sys.stderr)
        return EXIT_TARGET_FAILED
    assert status is not None  # started, when none was running
    print(f"daemon {status.pid} serves {status.root}")
    return EXIT_OK


def _stop(paths: DaemonPaths, config: ProjectConfig) -> int:
    status = read_status(paths)
    if status is None:
        print(f"no daemon serves {config.root}")
        return EXIT_OK
    if status.kind != "headless":
        print(f"lowerd: daemon {status.pid} is an editor's: it ends with it", file=sys.stderr)
        return EXIT_TARGET_FAILED
    stop_daemon(paths, status)
    print(f"stopped daemon {status.pid}")
    return EXIT_OK


def _restart(paths: DaemonPaths, config: ProjectConfig) -> int:
    if _stop(paths, config) != EXIT_OK:
        return EXIT_TARGET_FAILED
    return _start(paths, config)


def _status(paths: DaemonPaths, config: ProjectConfig) -> int:
    status = read_status(paths)
    if status is None:
        print(f"no daemon serves {config.root}")
        return EXIT_TARGET_FAILED
    reply = ask(status, StatusCall())
    if not isinstance(reply, StatusFrame):
        message = getattr(reply, "message", type(reply).__name__)
        raise DaemonError(f"the daemon did not tell its status: {message}")
    up = time.time() - status.started
    print(f"daemon {status.pid} serves {status.root} ({status.kind}, up {up:.0f} s)")
    print(f"  socket: {status.socket}")
    if status.log:
        print(f"  log:    {status.log}")
    if why := status.mismatch(config):
        print(f"  stale:  {why}; the next lowerd build restarts it")
    for build in reply.builds:
        print(f"  building {build.target} (pid {build.pid}, {build.seconds} s)")
    for peak in reply.peaks:
        if peak.config == str(config.path):
            print(f"  {peak.target}: last build peaked at {peak.bytes / 2**20:.0f} MiB RSS")
    return EXIT_OK


_DAEMON_ACTIONS: dict[str, Callable[[DaemonPaths, ProjectConfig], int]] = {
    "start": _start,
    "stop": _stop,
    "status": _status,
    "restart": _restart,
}
