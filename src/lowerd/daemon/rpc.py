"""The daemon's private socket: where `lowerd build` and `lowerd daemon` reach a running daemon.

It runs inside whichever asyncio loop hosts the daemon: the headless one's (daemon/headless.py)
or the editor's language server's, so that CLI clients and the editor share one daemon per
project root, its warm workers and what it knows.

The wire is length-prefixed msgpack frames (worker/frames.py), never pickle; one request per
connection, each request and reply typed in daemon/rpc_messages.py.

A request is checked whole before anything is done (parse_request, by project/wire.py): a frame
that is not msgpack, not a map, of an unknown op, or with a field missing, unknown or of the wrong
type is answered with an error frame naming the field; the client prints it and exits 2.

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
from collections.abc import Callable, Coroutine
from typing import Any

from lowerd.daemon.build_service import BuildService
from lowerd.daemon.client_slots import ClientSlots
from lowerd.daemon.compare_service import CompareService
from lowerd.daemon.rpc_messages import (
    REQUESTS,
    BuildCall,
    CompareCall,
    ErrorFrame,
    FinalFrame,
    ProgressFrame,
    Reply,
    Request,
    StatusCall,
    StatusFrame,
    StoppingFrame,
)
from lowerd.daemon.runtime import (
    DaemonPaths,
    DaemonStatus,
    InstanceLock,
    new_status,
    peer_credentials,
    remove_files,
    write_status,
)
from lowerd.project.batch import Outcome
from lowerd.project.config import ProjectConfig
from lowerd.project.errors import ConfigError, LowerdError
from lowerd.project.wire import WireError, decode_tagged, encode
from lowerd.worker.frames import FrameError, encode_frame, read_frame_async

log = logging.getLogger(__name__)

# A daemon started while the one it replaces is still closing waits for its lock a little.
LOCK_ATTEMPTS, LOCK_RETRY_SECONDS = 20, 0.1
REFUSED_LINGER_SECONDS = 2.0


class RequestError(Exception):
    """A request the daemon does not act on; the message names the field that is wrong."""


def parse_request(frame: Any) -> Request:
    """The request a decoded frame makes; RequestError naming each field that is wrong."""
    try:
        request: Request = decode_tagged(REQUESTS, frame, "request")
    except WireError as error:
        raise RequestError(str(error)) from error
    return request


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
        self.compare = CompareService(service.pool)  # the same warm workers as builds
        self.kind = kind  # "headless", or "lsp": then `stop` is refused, the editor owns it
        self.on_stop = on_stop
        self.paths: DaemonPaths | None = None
        self.status: DaemonStatus | None = None
        self._lock: InstanceLock | None = None
        self._server: asyncio.AbstractServer | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self._slots = ClientSlots()

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
        except ConnectionError as error:
            log.info("client dropped: %s", error)
        except Exception as error:  # the daemon outlives any failure of one request
            log.exception("a request failed")
            with contextlib.suppress(Exception):
                message = f"the daemon failed: {type(error).__name__}: {error}"
                await _reply(writer, ErrorFrame(message))
        finally:
            self._clients.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pid, uid = peer_credentials(writer.get_extra_info("socket"))
        if uid != os.geteuid():
            log.warning("refused a client of uid %d", uid)
            await _refuse(reader, writer, f"uid {uid} may not use this daemon")
            return
        async with self._slots.slot(pid):
            await self._answer_request(reader, writer)

    async def _answer_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            frame = await read_frame_async(reader)
            if frame is None:
                return  # it left before a whole request: nobody to answer
            request = parse_request(frame)
        except (FrameError, RequestError) as error:
            log.warning("refused a malformed request: %s", error)
            await _refuse(reader, writer, str(error))
            return
        if isinstance(request, BuildCall):
            await self._build(request, reader, writer)
        elif isinstance(request, CompareCall):
            await self._compare(request, reader, writer)
        elif isinstance(request, StatusCall):
            status = encode(self.status) if self.status is not None else {}
            builds, peaks = tuple(self.service.builds()), tuple(self.service.peaks())
            await _reply(writer, StatusFrame(status, builds, peaks))
        elif self.kind == "headless":  # stop
            await _reply(writer, StoppingFrame())
            self.on_stop()
        else:
            message = "this daemon is an editor's language server: it ends with the editor"
            await _reply(writer, ErrorFrame(message))

    async def _build(
        self, request: BuildCall, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        build = self.service.build(
            request.config, list(request.targets), request.use_cache, request.jobs, _sender(writer)
        )
        await _answer_while_connected(build, reader, writer)

    async def _compare(
        self, request: CompareCall, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        async def compare() -> tuple[dict[str, Any], Outcome]:
            compared, outcome = await self.compare.compare(
                request.config,
                request.target,
                request.backends or None,
                request.use_cache,
                _sender(writer),
            )
            return encode(compared), outcome

        await _answer_while_connected(compare(), reader, writer)


def _sender(writer: asyncio.StreamWriter) -> Callable[[ProgressFrame], None]:
    def send(frame: ProgressFrame) -> None:
        if not writer.is_closing():
            writer.write(encode_frame(encode(frame)))

    return send


async def _answer_while_connected(
    work: Coroutine[Any, Any, tuple[dict[str, Any], Outcome]],
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    """Run a build's or compare's work and send its final frame; a client that goes away first
    cancels it (and so its workers)."""
    build = asyncio.create_task(work)
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


def _final_frame(build: asyncio.Task[tuple[dict[str, Any], Outcome]]) -> FinalFrame:
    """What the client prints and exits with: the document, or the error main() would print."""
    try:
        document, outcome = build.result()
        return FinalFrame(document, outcome)
    except ConfigError as error:
        return FinalFrame(None, "usage", str(error))
    except LowerdError as error:
        message = str(error)
    except Exception as error:  # the daemon outlives any failure of one request
        log.exception("build request failed")
        message = f"the daemon failed: {type(error).__name__}: {error}"
    return FinalFrame(None, "target_failed", message)


async def _reply(writer: asyncio.StreamWriter, frame: Reply) -> None:
    writer.write(encode_frame(encode(frame)))
    await writer.drain()


async def _refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, message: str) -> None:
    """Answer with an error frame. What else the client sent is read and dropped unparsed:
    closing on unread data would reset the connection, and the client would see a broken pipe
    instead of the reason."""
    await _reply(writer, ErrorFrame(message))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(_until_closed(reader), REFUSED_LINGER_SECONDS)


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
