"""The warm fork server: imports torch and ExecuTorch once, then forks one fresh worker per build.

Run as `python -m lowerd.worker.forkserver --fd N --parent PID` by the daemon's WorkerPool
(worker/fork_server_client.py). It talks to the daemon over a SOCK_SEQPACKET socket (one msgpack
message per packet); each build request carries the write end of a pipe (SCM_RIGHTS), which the
forked worker uses to stream its events straight to the daemon's supervisor (worker/workers.py).
fork_worker is also how the in-process CLI and the Ray task fork theirs (worker/local_builds.py).
A worker imports the user's modules into a fresh process: no importlib.reload, and no state left
over from the previous build. The fork server itself never runs user code.

messages in:  protocol.WorkerJob (with the pipe's fd), protocol.PreloadRequest
messages out: protocol.ForkServerMessage (ready, started, exited, preloaded)
worker events (on the pipe): protocol.WorkerEvent (progress..., partitioned..., a verifying
target's built result, libraries, peak_rss, then the result)
A verifying target's worker forks its runtime zygote first (lowering/runtime_zygote.py).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import logging
import os
import resource
import select
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO

import msgpack

from lowerd.project.backends import Backend
from lowerd.project.parent_death import die_with_parent, set_parent_death_signal
from lowerd.project.process_threads import thread_count
from lowerd.project.result import ErrorInfo, TargetResult
from lowerd.project.wire import encode
from lowerd.worker.frames import write_frame
from lowerd.worker.kill import kill_worker
from lowerd.worker.libraries import imported_libraries
from lowerd.worker.protocol import (
    BuiltEvent,
    ExitedMessage,
    ForkServerMessage,
    LibrariesEvent,
    PartitionedEvent,
    PeakRssEvent,
    PreloadedMessage,
    PreloadRequest,
    ProgressEvent,
    ProtocolError,
    ReadyMessage,
    ResultEvent,
    StartedMessage,
    WorkerEvent,
    WorkerJob,
    parse_fork_server_request,
)

MAX_MESSAGE = 64 * 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--preload", default="xnnpack", help="backends to import up front")
    parser.add_argument("--parent", type=int, help="the daemon's pid: die with it while warming")
    args = parser.parse_args()
    channel = socket.socket(fileno=args.fd)
    # Warming up reads no channel, so a daemon gone meanwhile would go unnoticed for seconds:
    # the kernel ends this process with it instead. (The daemon kills a warming fork server when
    # it closes; this covers a daemon that was killed.)
    if args.parent is not None:
        die_with_parent(signal.SIGKILL, args.parent)
    else:
        set_parent_death_signal(signal.SIGKILL)
    _log_to_daemon_log()
    warm_up(args.preload.split(",") if args.preload else [])
    _send(channel, ReadyMessage())
    # Serving, it notices the daemon's end on its channel and kills its workers first, which a
    # SIGKILL would leave running.
    set_parent_death_signal(0)
    _serve(channel)


def _log_to_daemon_log() -> None:
    """Its stderr, and its workers', is the daemon's log (or the editor's server's stderr).
    Libraries' records and warnings reach it at DEBUG only (project/library_output.py): without
    this handler, logging's last resort printed every library WARNING."""
    from lowerd.project.library_output import capture_library_warnings, log_level

    level = log_level("WARNING", "LOWERD_DAEMON_LOG_LEVEL", "LOWERD_LOG_LEVEL")
    handler = logging.StreamHandler(sys.stderr)
    # On the handler, not only the root: library records reach it through root.handle(), which
    # skips the root's own level.
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    capture_library_warnings()


def warm_up(backends: list[str]) -> None:
    """The fork server's state before its first fork (also bench/bench_early.py's, to time a
    build as a worker starts it): the engine preloaded, then frozen."""
    _preload(backends)
    # What the fork server imported lives as long as it does: keep it out of every collection
    # in the workers (a full collection over torch's objects costs ~0.2 s), and unshared.
    gc.collect()
    gc.freeze()


def _preload(backends: list[str]) -> None:
    """Everything a build imports that does not depend on the user: paid once, not per build."""
    from lowerd.project.project_store import store_for
    from lowerd.worker.preload import import_engine

    import_engine(store_for(None))
    from lowerd.lowering.partitioners import make_partitioner
    from lowerd.project.backends import BACKENDS

    for name in backends:
        if name in BACKENDS:
            make_partitioner(BACKENDS[name])
    _lower_once([BACKENDS[name] for name in backends if name in BACKENDS])


def _lower_once(backends: list[Backend]) -> None:
    """Lower a one-op model: the first lowering in a process pays seconds of lazy imports and
    one-time set-up inside torch.export and ExecuTorch; done here, every fork starts past it."""
    import torch
    from executorch.exir import to_edge_transform_and_lower

    from lowerd.lowering.partitioners import make_partitioner
    from lowerd.lowering.vulkan_patterns import pattern_graphs_made_once

    # On one thread: a parallel op here would start GNU OpenMP's thread pool, and a fork of a
    # process with that pool hangs at its first parallel op (gomp_team_barrier_wait_end).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval()
        program = torch.export.export(model, (torch.zeros(1, 4),))
        partitioners = [make_partitioner(backend) for backend in backends]
        # Vulkan's pattern graphs are made here too, once: every fork has them.
        with pattern_graphs_made_once():
            lowered = to_edge_transform_and_lower({"forward": program}, partitioner=partitioners)
        lowered.to_executorch()
    finally:
        torch.set_num_threads(threads)  # the workers' ops run on every core again


def _serve(channel: socket.socket) -> None:
    running: dict[int, int] = {}  # pid -> build id
    # Preloads wait until no worker runs: a worker's build asks for one before it ends, and the
    # seconds of imports must not stand between its exit and the daemon hearing of it (the
    # daemon answers a build once its worker's exit is known).
    preloads: list[PreloadRequest] = []
    while True:
        readable, _, _ = select.select([channel], [], [], 0.05)
        _reap(channel, running)
        if not readable:
            if preloads and not running:  # between builds: warm up for the next ones
                _send(channel, _import_libraries(list(preloads.pop(0).modules)))
            continue
        try:
            data, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, 1)
        except OSError:
            data, fds = b"", []
        if not data:  # the daemon is gone: so are we, and so are our workers
            for pid in running:
                kill_worker(pid)
            return
        try:
            request = parse_fork_server_request(msgpack.unpackb(data, raw=False))
        except (ProtocolError, ValueError):  # no daemon sends it: nothing to answer
            request = None
        if isinstance(request, WorkerJob) and fds:
            # A preload the last build asked for, still waiting because this job came as soon
            # as that build was answered: this build starts warm, as a later one would.
            while preloads and not running:
                _send(channel, _import_libraries(list(preloads.pop(0).modules)))
            pid = fork_worker(request, fds[0], inherited=channel)
            running[pid] = request.id
            _send(channel, StartedMessage(request.id, pid))
        elif isinstance(request, PreloadRequest):
            preloads.append(request)
        for fd in fds:
            os.close(fd)


def _import_libraries(names: list[str]) -> PreloadedMessage:
    """Import installed libraries a build used, so that the next forks start with them.

    As in the warm-up, on one thread: a parallel op run by an import would start OpenMP's pool,
    and forks of this process would hang. A library whose import starts a thread that a fork
    would copy makes forking unsafe, so a forked probe imports the names first, in order, and the
    server imports only those before the first that does; it and the rest stay cold (`cold` in
    the reply). A thread its library retires before every fork does not count: OpenBLAS
    (scipy.linalg, which transformers' modeling_utils imports) joins its pool in a pthread_atfork
    handler. Should the server keep a thread anyway, it says `tainted` and the daemon starts a
    fresh one.
    """
    threads_before = thread_count()
    safe = names[: _on_one_thread(_thread_free_prefix, names)]
    imported = _on_one_thread(_import_each, safe)
    gc.collect()
    gc.freeze()  # as after the warm-up: the workers never scan what the server holds
    tainted = _threads_across_a_fork() > threads_before
    return PreloadedMessage(imported, tuple(names[len(safe) :]), tainted)


def _on_one_thread(run: Callable[[list[str]], int], names: list[str]) -> int:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run(names)
    finally:
        torch.set_num_threads(threads)


def _import_each(names: list[str]) -> int:
    """How many of names imported; a library that cannot be imported here stays cold."""
    import importlib

    imported = 0
    for name in names:
        try:
            importlib.import_module(name)
            imported += 1
        except BaseException:
            continue
    return imported


def _thread_free_prefix(names: list[str]) -> int:
    """How many of names, imported in order, start no thread: found in a forked probe, so that
    this process never runs an import that starts one."""
    read_end, write_end = os.pipe()
    _flush_output()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.write(write_end, _imports_before_a_thread(names).to_bytes(4, "big"))
        finally:
            _flush_output()
            os._exit(0)
    os.close(write_end)
    try:
        answer = os.read(read_end, 4)  # until the probe has imported them or died
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    return int.from_bytes(answer, "big") if len(answer) == 4 else 0


def _imports_before_a_thread(names: list[str]) -> int:
    import importlib

    threads = thread_count()
    for index, name in enumerate(names):
        try:
            importlib.import_module(name)
        except BaseException:
            pass
        if thread_count() > threads and _threads_across_a_fork() > threads:
            return index
    return len(names)


def _threads_across_a_fork() -> int:
    """The threads this process has right after forking a child that exits at once: those no
    fork handler of its libraries retires, the ones a fork of this process would copy."""
    _flush_output()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return thread_count()


def _reap(channel: socket.socket, running: dict[int, int]) -> None:
    while running:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        build_id = running.pop(pid, None)
        if build_id is not None:
            _send(channel, ExitedMessage.reaped(build_id, status, usage))


def fork_worker(job: WorkerJob, fd: int, inherited: socket.socket | None = None) -> int:
    """Fork a worker that builds `job`'s target and writes its events, then its result, as
    frames to `fd`; the worker's pid. Also how an in-process `lowerd build` runs each target, so
    that user code which exits or crashes ends only its worker."""
    _flush_output()  # else the worker writes the parent's buffered output a second time
    pid = os.fork()
    if pid:
        return pid
    # The worker: its own process group, so that killing the build also ends what it spawned.
    code = 1
    try:
        if inherited is not None:
            inherited.close()
        os.setsid()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _user_stdout_to_stderr()
        _route_library_logs()
        if job.memory_limit:
            limit = int(job.memory_limit)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        with os.fdopen(fd, "wb") as events:
            _build(job, events)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        _flush_output()
        os._exit(code)


def _user_stdout_to_stderr() -> None:
    """Whatever the build prints (user code, libraries, C++) goes to stderr: stdout may carry a
    `--json` document or an editor's protocol, and the result travels on its own pipe."""
    os.dup2(2, 1)
    sys.stdout = sys.stderr  # line-buffered: prints interleave with the rest of stderr in order


def _route_library_logs() -> None:
    """Again in each worker: a library that set torch's logging up anew since the warm-up
    (torch._logging.set_logs) brought its stderr handlers back."""
    from lowerd.project.library_output import route_library_logs

    route_library_logs()


def _flush_output() -> None:
    """os._exit skips every flush: push out Python's buffers and C's stdio ones."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed, or its reader is gone: nothing to save
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass


def _build(job: WorkerJob, events: BinaryIO) -> None:
    from lowerd.project.build_state import remember_peak_rss
    from lowerd.project.config import load_config
    from lowerd.project.errors import LowerdError
    from lowerd.project.project_store import store_for
    from lowerd.project.report_model import MethodReport

    def send(event: WorkerEvent) -> None:
        write_frame(events, encode(event))

    def progress(stage: str, target: str, detail: str | None) -> None:
        send(ProgressEvent(stage, detail))

    def partitioned(method: str, report: MethodReport) -> None:
        send(PartitionedEvent(method, report))

    def built(result: TargetResult) -> None:
        send(BuiltEvent(result))

    try:
        config = load_config(Path(job.config)).with_backends(job.backends)
        if job.verify:  # `lowerd verify`: this target verifies, whatever the file says
            config = config.with_verify([job.target])
        if job.out_dir:
            config = replace(config, out_dir=Path(job.out_dir))
        target = config.targets[job.target]
        if target.verify:  # before the entry runs torch, and before the store starts threads
            _start_runtime_zygote(events)
        store = store_for(config) if job.use_cache else None
    except (LowerdError, KeyError) as error:
        send(ResultEvent(_config_failure(job, error)))
        return
    from lowerd.lowering.build import build_target  # the engine: not for a config's failure

    os.chdir(config.root)  # entries open files relative to their project, as scripts do
    sys.argv = [str(config.path)]
    reuse = job.use_cache  # --no-cache skips the kept-.pte shortcut too
    modules_before = set(sys.modules)
    result = build_target(
        config,
        target,
        store,
        progress,
        reuse,
        on_partitioned=partitioned,
        bench=bool(job.bench),
        on_built=built,
    )
    if target.verify:  # its CPU, and its children's, counted in this worker's before it exits
        from lowerd.lowering.runtime_run import stop_runtime_zygote

        stop_runtime_zygote()
    if job.warm_libraries and config.warm_libraries:  # for the server's next forks
        send(LibrariesEvent(tuple(imported_libraries(modules_before, config.root))))
    # Before the result, so the supervisor has it when the build ends: the daemon decides by
    # it whether a later build of this target fits in the memory free while others run, and a
    # Ray task asks for it in the record (issue 14).
    peak = _peak_rss()
    if result.ok:
        with contextlib.suppress(OSError):  # a hint for admission: never worth the result
            remember_peak_rss(config, target, peak)
    send(PeakRssEvent(peak))
    send(ResultEvent(_out_of_memory(result, job.memory_limit)))


def _start_runtime_zygote(events: BinaryIO) -> None:
    """The process the verification's runtime children are forked from, forked while this
    worker has run no torch op (lowering/runtime_zygote.py): none of them inherits the OpenMP
    pool its eager run starts. Only a verifying target's worker pays for it."""
    from lowerd.lowering.runtime_run import start_runtime_zygote

    start_runtime_zygote(close=(events.fileno(),))  # the supervisor waits for that pipe's end


def _out_of_memory(result: TargetResult, limit: int | None) -> TargetResult:
    """A MemoryError under the worker's limit is the limit's doing, not the line that happened
    to allocate: report it like a worker ended for its memory, at the entry."""
    error = result.error
    if not limit or error is None or not _hit_memory_limit(error.message, limit):
        return result
    where = f" (at {error.file}:{error.line})" if error.file else ""
    message = (
        f"the build worker ran out of memory: memory limit {limit // 2**20} MiB "
        f"reached{where} while: {error.message}"
    )
    return result.with_error(ErrorInfo("worker-crash", message))


# How an allocation's failure reads in Python, torch's allocator and C++.
_ALLOCATION_FAILURES = (
    "MemoryError",
    "can't allocate memory",
    "Cannot allocate memory",
    "bad_alloc",
)
# A failed request for more address space leaves the peak below the limit by at most its size.
_ALLOCATION_SLACK = 256 * 2**20


def _hit_memory_limit(message: str, limit: int) -> bool:
    """Whether a failed build failed for its memory limit. C code whose allocation fails may not
    say so (`SystemError: error return without exception set`), so a worker whose address space
    reached the limit failed for it, whatever its message."""
    if any(words in message for words in _ALLOCATION_FAILURES):
        return True
    return _peak_address_space() + _ALLOCATION_SLACK >= limit


def _peak_address_space() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmPeak:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _peak_rss() -> int:
    # Linux reports ru_maxrss in KiB. A fork starts with the fork server's pages (torch, shared
    # copy-on-write), so this overestimates what the build added: the safe side for admission.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _config_failure(job: WorkerJob, error: Exception) -> TargetResult:
    from lowerd.project.errors import LowerdError

    if isinstance(error, LowerdError):
        info = error.info()
        return TargetResult.failed(job.target, info.kind, info.message, info.file, info.line)
    message = f"no target {job.target!r} in {job.config}"
    return TargetResult.failed(job.target, "config-error", message, job.config)


def _send(channel: socket.socket, message: ForkServerMessage) -> None:
    channel.send(msgpack.packb(encode(message), use_bin_type=True))


if __name__ == "__main__":
    main()
