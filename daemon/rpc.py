"""The daemon's private socket: where `lowerd build` and `lowerd daemon` reach a running daemon.

It runs inside whichever asyncio loop hosts the daemon: the headless one's (daemon/headless.py)
or the editor's language server's, so that CLI clients and the editor share one daemon per
project root, its warm workers and what it knows.

The wire is length-prefixed msgpack frames (daemon/frames.py), never pickle; one request per
connection:

    build   {"op": "build", "config", "targets", "use_cache", "jobs"}
            -> {"type": "progress", "target", "stage", "detail"}...
            -> {"type": "final", "document", "exit_code", "message"}
    status  {"op": "status"} -> {"type": "status", "status", "builds", "peaks"}
    stop    {"op": "stop"}   -> {"type": "stopping"}
    refused or unknown       -> {"type": "error", "message"}

A client that closes its end before the final frame (Ctrl-C, killed) cancels its builds. Only
the daemon's own user may connect: the folder is 0700 and the socket 0600, and the peer's uid is
checked again with SO_PEERCRED.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from lowerd.daemon.build_service import BuildService, Frame
from lowerd.daemon.frames import FrameError, encode_frame, read_frame_async
from lowerd.daemon.runtime import (
    DaemonPaths,
    DaemonStatus,
    InstanceLock,
    new_status,
    peer_uid,
    remove_files,
    write_status,
)
from lowerd.lowering.batch import EXIT_TARGET_FAILED, EXIT_USAGE
from lowerd.lowering.config import ProjectConfig
from lowerd.lowering.errors import ConfigError, LowerdError

log = logging.getLogger(__name__)

# A daemon started while the one it replaces is still closing waits for its lock a little.
LOCK_ATTEMPTS, LOCK_RETRY_SECONDS = 20, 0.1
REFUSED_LINGER_SECONDS = 2.0


class RpcServer:
    def __init__(
        self,
        config: ProjectConfig,
        service: BuildService,
        kind: str,
        on_stop: Callable[[], None],
    ):
        self.config = config
        self.service = service
        self.kind = kind  # "headless", or "lsp": then `stop` is refused, the editor owns it
        self.on_stop = on_stop
        self.paths: DaemonPaths | None = None
        self.status: DaemonStatus | None = None
        self._lock: InstanceLock | None = None
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.Task] = set()

    async def start(self) -> bool:
        """Listen and publish the status file; False if another daemon serves this project.

        Raises RuntimeDirError when the runtime folder is not private to this user.
        """
        self.paths = DaemonPaths.for_root(self.config.root)
        self._lock = InstanceLock(self.paths)
        if not await _acquire(self._lock):
            return False
        # Holding the lock, this is the only daemon of the project: a socket there is a dead one's.
        self.paths.socket.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.paths.socket))
        os.chmod(self.paths.socket, 0o600)
        self._server = await asyncio.start_unix_server(self._serve_client, sock=listener)
        # Written last: a status file promises a socket that answers.
        self.status = new_status(self.paths, self.config, self.kind)
        write_status(self.paths, self.status)
        log.info("listening on %s", self.paths.socket)
        return True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for client in self._clients:
            client.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        if self.paths is not None and self.status is not None:
            remove_files(self.paths, self.status.pid)
        if self._lock is not None:
            self._lock.release()

    async def _serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            await self._answer(reader, writer)
        except (ConnectionError, FrameError) as error:
            log.info("client dropped: %s", error)
        finally:
            self._clients.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        uid = peer_uid(writer.get_extra_info("socket"))
        if uid != os.geteuid():
            log.warning("refused a client of uid %d", uid)
            await _reply(writer, {"type": "error", "message": f"uid {uid} may not use this daemon"})
            # Its request is read and dropped unparsed: closing on unread data would reset the
            # connection, and the client would see a broken pipe instead of the reason.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_until_closed(reader), REFUSED_LINGER_SECONDS)
            return
        request = await read_frame_async(reader)
        op = request.get("op") if request else None
        if op == "build":
            await self._build(request, reader, writer)
        elif op == "status":
            status = {"type": "status", "status": asdict(self.status)}
            peaks, builds = self.service.peaks(), self.service.builds()
            await _reply(writer, {**status, "builds": builds, "peaks": peaks})
        elif op == "stop" and self.kind == "headless":
            await _reply(writer, {"type": "stopping"})
            self.on_stop()
        elif op == "stop":
            message = "this daemon is an editor's language server: it ends with the editor"
            await _reply(writer, {"type": "error", "message": message})
        elif request is not None:
            await _reply(writer, {"type": "error", "message": f"unknown request {op!r}"})

    async def _build(
        self, request: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        def send(frame: Frame) -> None:
            if not writer.is_closing():
                writer.write(encode_frame(frame))

        build = asyncio.create_task(
            self.service.build(
                str(request["config"]),
                [str(name) for name in request.get("targets", [])],
                bool(request.get("use_cache", True)),
                int(request.get("jobs", 1)),
                send,
            )
        )
        gone = asyncio.create_task(_until_closed(reader))
        try:
            await asyncio.wait({build, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not build.done():  # the client went away, or the daemon is closing
                build.cancel()
                await asyncio.gather(build, return_exceptions=True)
            gone.cancel()
        if build.cancelled():
            return
        await _reply(writer, _final_frame(build))


def _final_frame(build: asyncio.Task) -> Frame:
    """What the client prints and exits with: the document, or the error main() would print."""
    try:
        document, exit_code = build.result()
        return {"type": "final", "document": document, "exit_code": exit_code, "message": None}
    except ConfigError as error:
        return {"type": "final", "document": None, "exit_code": EXIT_USAGE, "message": str(error)}
    except LowerdError as error:
        message = str(error)
    except Exception as error:  # the daemon outlives any failure of one request
        log.exception("build request failed")
        message = f"the daemon failed: {type(error).__name__}: {error}"
    return {"type": "final", "document": None, "exit_code": EXIT_TARGET_FAILED, "message": message}


async def _reply(writer: asyncio.StreamWriter, frame: Frame) -> None:
    writer.write(encode_frame(frame))
    await writer.drain()


async def _until_closed(reader: asyncio.StreamReader) -> None:
    """Returns when the client closes its end; a client sends nothing after its request."""
    while await reader.read(65536):
        pass


async def _acquire(lock: InstanceLock) -> bool:
    for _ in range(LOCK_ATTEMPTS):
        if lock.acquire():
            return True
        await asyncio.sleep(LOCK_RETRY_SECONDS)
    return False
