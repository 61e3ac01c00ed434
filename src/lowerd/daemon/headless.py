"""A project's daemon without an editor: `python -m lowerd.daemon.headless --config PATH`.

Warm build workers behind the private socket (daemon/rpc.py), nothing more. `lowerd daemon start`
and `lowerd build --daemon` start it detached, its output going to a log file in the runtime
folder; `lowerd daemon stop`, SIGTERM or SIGINT end it, and its workers with it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from lowerd.daemon.build_service import BuildService
from lowerd.daemon.rpc import RpcServer
from lowerd.daemon.runtime import DaemonPaths, InstanceLock, RuntimeDirError, preload_backends
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.library_output import log_level
from lowerd.worker.workers import WorkerPool

log = logging.getLogger("lowerd.daemon")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lowerd.daemon.headless")
    parser.add_argument("--config", required=True, help="the project's pyproject.toml")
    parser.add_argument("--detach", action="store_true", help="leave the starting process")
    args = parser.parse_args(argv)
    try:
        config = load_config(Path(args.config))
    except ConfigError as error:
        print(f"lowerd daemon: {error}", file=sys.stderr)
        return 2
    try:
        _check_runtime_files(config)
    except RuntimeDirError as error:
        print(f"lowerd daemon: {error}", file=sys.stderr)
        return 2
    if args.detach:
        _detach()
    logging.basicConfig(
        stream=sys.stderr,
        level=log_level("INFO", "LOWERD_DAEMON_LOG_LEVEL"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(serve(config))


def _check_runtime_files(config: ProjectConfig) -> None:
    """Before detaching, while the starter still waits for this process: a runtime folder or
    lock lowerd cannot use fails the start with its reason, rather than in a detached daemon
    whose starter then waits in vain for its socket."""
    InstanceLock(DaemonPaths.for_root(config.root)).held()


def _detach() -> None:
    """Fork and let the starter reap the parent at once: the daemon is then nobody's child
    (never the starter's zombie), and leads its own session, out of reach of the Ctrl-C of the
    terminal it was started from."""
    if os.fork():
        os._exit(0)
    os.setsid()
    os.chdir("/")  # config paths are absolute; holding no folder open lets tmp projects go


async def serve(config: ProjectConfig) -> int:
    pool = WorkerPool(max_workers=os.cpu_count() or 1, preload=tuple(preload_backends(config)))
    stopping = asyncio.Event()
    server = RpcServer(config, BuildService(pool), "headless", stopping.set)
    try:
        if not await server.start():
            log.info("another daemon serves %s: leaving it be", config.root)
            return 0
    except RuntimeDirError as error:
        log.error("%s", error)
        return 2
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    # torch and ExecuTorch load in the fork server meanwhile: the first build waits for them, an
    # up-to-date answer never does.
    warming = asyncio.create_task(pool.start())
    warming.add_done_callback(_log_failure)
    log.info("daemon %d serves %s", os.getpid(), config.root)
    try:
        await stopping.wait()
    finally:
        await server.close()
        # A fork server still warming up is killed, never left to finish its imports orphaned.
        warming.cancel()
        await asyncio.gather(warming, return_exceptions=True)
        await pool.close()
    log.info("daemon %d stopped", os.getpid())
    return 0


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the fork server did not start: %s", task.exception())


if __name__ == "__main__":
    raise SystemExit(main())
