"""The language server's wire: every request gets a reply, and a client's framing mistake costs
that one message, never the connection.

pygls 2.1.1 falls short of JSON-RPC in three places, and this module replaces them:

- A request whose params do not structure (hover with `{}`, `textDocument: null`) raises inside
  the reader's `json.loads(object_hook=...)` (pygls/protocol/json_rpc.py `structure_message`);
  pygls/io_.py `run_async` logs it and shows a message, and the request never gets its reply.
  `GuardedProtocol.receive` answers -32602 (invalid params) or -32600 (invalid request) with the
  request's id. Its converter also refuses the coercions cattrs makes silently (`uri: 5` became
  "5", `line: "3"` became 3). Requests without "jsonrpc" (AttributeError in `handle_message`),
  with a non-string method, or after `shutdown` (dropped by `handle_message`) are answered too.
- `run_async` reads a body of exactly the header's Content-Length, then expects the next header at
  the start of a line: after a wrong length the next header is glued to the rest of a body and
  never matches, so the server is deaf until a bare CRLF arrives. `MessageFramer` finds the next
  `Content-Length:` wherever it is.
- `run_async` allocates whatever Content-Length says (1 TiB: MemoryError, the server dies).
  `MessageFramer` refuses a length over MAX_CONTENT_LENGTH and looks for the next header.

`GuardedLanguageServer` runs its own reader on stdio and TCP; everything else is pygls'.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from threading import Event
from typing import Any, BinaryIO

from cattrs import Converter, transform_error
from lsprotocol import types
from pygls.exceptions import (
    FeatureNotificationError,
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
)
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCNotification, JsonRPCRequestMessage, LanguageServerProtocol
from pygls.protocol import default_converter as pygls_converter

from lowerd.project.wire import is_sequence_type, sequence_decoder

log = logging.getLogger(__name__)

MsgId = int | str  # a JSON-RPC request id

# The largest body read: LSP messages are a few MB at most (a didOpen of a big file); a larger
# Content-Length is a client's mistake, and allocating it could take the machine's memory.
MAX_CONTENT_LENGTH = 64 * 1024 * 1024

_READ_CHUNK = 64 * 1024
# While looking for a header, the bytes kept from what did not match: enough for a header line
# split between two reads, so the scan's memory does not grow with the garbage.
_SCAN_TAIL = 1024
# A header block (the Content-Length line to the blank line) longer than this is not one.
_MAX_HEADER_BLOCK = 8 * 1024
_MAX_LENGTH_DIGITS = 18  # int() of a longer digit string is slow or refused; it is over the cap
_SHOWN_CHARS = 200  # of a refused message in the log

_CONTENT_LENGTH = re.compile(rb"content-length:[ \t]*(\d+)[ \t]*\r\n", re.IGNORECASE)
_HEADER_END = b"\r\n\r\n"
_HEADER_LINES = re.compile(rb"(?:[!-9;-~]+:[^\r\n]*\r\n)*")  # `Name: value` lines


class MessageFramer:
    """Splits a byte stream into message bodies at `Content-Length` headers.

    Bytes that are not a header where one is expected (the rest of a body whose Content-Length
    was too short, a body after a length over the cap) are skipped up to the next
    `Content-Length:` line, wherever it starts, and the skip is logged.
    """

    def __init__(self, max_length: int = MAX_CONTENT_LENGTH):
        self.max_length = max_length
        self._buffer = bytearray()
        self._length: int | None = None  # of the body being read, once its header is consumed
        self._skipped = 0  # bytes dropped since the last header

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def unread(self, data: bytes) -> None:
        """Puts bytes back in front, to be scanned for a header again (a body that was not one
        message: its header's length was wrong)."""
        self._buffer[:0] = data

    def next_body(self) -> bytes | None:
        """The next complete body, or None until more bytes are fed."""
        if self._length is None and not self._read_header():
            return None
        assert self._length is not None
        if len(self._buffer) < self._length:
            return None
        body = bytes(self._buffer[: self._length])
        del self._buffer[: self._length]
        self._length = None
        return body

    def _read_header(self) -> bool:
        """Consumes the next acceptable header block; False when more bytes are needed."""
        while True:
            match = _CONTENT_LENGTH.search(self._buffer)
            if match is None:
                self._skip(max(0, len(self._buffer) - _SCAN_TAIL))
                return False
            end = self._buffer.find(_HEADER_END, match.end() - 2)
            if end < 0 and len(self._buffer) - match.end() <= _MAX_HEADER_BLOCK:
                return False  # the rest of the header block is still to come
            if end < 0 or not _HEADER_LINES.fullmatch(self._buffer, match.end(), end + 2):
                self._skip(match.end())  # not a header block after all: look further
                continue
            digits, start = bytes(match[1]), match.start()  # the match sees the buffer change
            self._skip(start, before_header=True)
            length = _length(digits)
            del self._buffer[: end + len(_HEADER_END) - start]
            if length > self.max_length:
                log.error(
                    "lowerd: a message's Content-Length is %s bytes, over the %d-byte limit: it "
                    "is skipped, with what follows up to the next header",
                    digits.decode(),
                    self.max_length,
                )
                continue
            self._report_skipped()
            self._length = length
            return True

    def _skip(self, count: int, before_header: bool = False) -> None:
        """Drops the first `count` bytes; header lines before a Content-Length are no loss."""
        if not (before_header and _HEADER_LINES.fullmatch(self._buffer, 0, count)):
            self._skipped += count
        del self._buffer[:count]

    def _report_skipped(self) -> None:
        if self._skipped:
            log.error(
                "lowerd: skipped %d bytes that were not a message, up to the next header",
                self._skipped,
            )
            self._skipped = 0


def _length(digits: bytes) -> int:
    return int(digits) if len(digits) <= _MAX_LENGTH_DIGITS else sys.maxsize


def leading_json(body: bytes) -> tuple[Any, bytes]:
    """A body that is not one JSON document: the JSON value it starts with (None if none), and
    the bytes after it, to scan for the next header. A value followed by more bytes means the
    Content-Length was too long; no value, too short (or not JSON at all)."""
    text = body.decode("utf-8", errors="surrogateescape")  # offsets map back to bytes exactly
    try:
        value, end = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
    except ValueError:
        return None, body
    return value, text[end:].encode("utf-8", errors="surrogateescape")


# Messages -----------------------------------------------------------------------------------


class GuardedProtocol(LanguageServerProtocol):
    """pygls' protocol, fed parsed JSON by `serve_messages`: a request it cannot hand to a
    handler gets an error reply instead of silence."""

    def receive(self, data: Any) -> None:
        try:
            self._route(data)
        except BrokenPipeError:
            raise  # the client is gone: the reader stops, as in pygls
        except Exception as error:  # pygls' reader, too, outlived a message it failed on
            log.exception("lowerd: a message could not be handled: %s", _shown(data))
            if (msg_id := request_id(data)) is not None:
                self.refuse(msg_id, JsonRpcInternalError(f"Internal Error: {error}"))

    def _route(self, data: Any) -> None:
        if not isinstance(data, dict):
            log.error("lowerd: dropped a message that is not a JSON object: %s", _shown(data))
        elif "method" not in data and ("result" in data or "error" in data):
            self._receive_response(data)
        elif _is_message_id(data.get("id")):
            self._receive_request(data["id"], data)
        elif data.get("id") is not None:
            log.error("lowerd: dropped a request whose id is no number or string: %s", _shown(data))
        else:
            self._receive_notification(data)

    def refuse(self, msg_id: MsgId | None, error: JsonRpcException) -> None:
        """Answers request `msg_id` with `error` (None: a message whose id could not be read,
        as JSON-RPC answers a parse error)."""
        log.warning("lowerd: refused request %r: %s", msg_id, error.message)
        if msg_id is None:  # pygls' converter would drop the `"id": null` JSON-RPC requires
            reply = {"code": error.code, "message": error.message}
            self._send_data({"jsonrpc": self.VERSION, "id": None, "error": reply})
        else:
            self._send_response(msg_id, error=error.to_response_error())

    def _receive_request(self, msg_id: MsgId, data: dict[str, Any]) -> None:
        method = data.get("method")
        if data.get("jsonrpc") != self.VERSION:
            self.refuse(msg_id, JsonRpcInvalidRequest('Invalid Request: "jsonrpc" must be "2.0"'))
        elif not isinstance(method, str):
            self.refuse(msg_id, JsonRpcInvalidRequest('Invalid Request: no "method" string'))
        elif self._shutdown and method != types.EXIT:  # LSP: InvalidRequest after shutdown
            self.refuse(msg_id, JsonRpcInvalidRequest("Invalid Request: the server is shut down"))
        else:
            try:
                message = self._structure(data, method, JsonRPCRequestMessage)
            except Exception as error:
                self.refuse(msg_id, JsonRpcInvalidParams(f"Invalid Params: {_why(error)}"))
                return
            self.handle_message(message)  # pygls answers a handler's exception (-32603)

    def _receive_notification(self, data: dict[str, Any]) -> None:
        method = data.get("method")
        if data.get("jsonrpc") != self.VERSION or not isinstance(method, str):
            log.error("lowerd: dropped a message that is not JSON-RPC 2.0: %s", _shown(data))
            return
        try:
            message = self._structure(data, method, JsonRPCNotification)
        except Exception as error:  # no reply possible: reported as pygls did
            log.error("lowerd: dropped notification %s: invalid params: %s", method, _why(error))
            invalid = JsonRpcInvalidParams(f"Invalid Params in {method}: {_why(error)}")
            self._server._report_server_error(invalid, FeatureNotificationError)
            return
        self.handle_message(message)

    def _receive_response(self, data: dict[str, Any]) -> None:
        try:
            message = self.structure_message(data)  # pygls' own: it knows the result types
        except Exception as error:
            log.error("lowerd: dropped a response: %s", _why(error.__cause__ or error))
            return
        self.handle_message(message)

    def _structure(self, data: dict[str, Any], method: str, fallback: type) -> Any:
        return self._converter.structure(data, self.get_message_type(method) or fallback)


def request_id(value: Any) -> MsgId | None:
    """The id to answer if `value` is a request."""
    if isinstance(value, dict) and "method" in value and _is_message_id(value.get("id")):
        message_id: MsgId = value["id"]
        return message_id
    return None


def _is_message_id(value: Any) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _why(error: BaseException) -> str:
    try:
        reasons = transform_error(error)
    except Exception:
        reasons = [str(error)]
    return "; ".join(reasons)[:_SHOWN_CHARS]


def _shown(data: Any) -> str:
    return repr(data)[:_SHOWN_CHARS]


def strict_converter() -> Converter:
    """pygls' converter, without cattrs' silent coercions of JSON scalars: a number where the
    protocol says string (`uri: 5`) is invalid params, not the string "5"."""
    # pygls leaves default_converter unannotated; it returns a cattrs Converter.
    converter: Converter = pygls_converter()  # type: ignore[no-untyped-call]
    for declared, accepted in ((str, (str,)), (int, (int,)), (float, (int, float))):
        converter.register_structure_hook(declared, partial(_strict_scalar, accepted))
    converter.register_structure_hook(bool, partial(_strict_scalar, (bool,)))
    # cattrs builds a sequence of any iterable: `arguments: "net"` became ("n", "e", "t")
    converter.register_structure_hook_factory(is_sequence_type, sequence_decoder)
    return converter


def _strict_scalar(accepted: tuple[type, ...], value: Any, declared: type) -> Any:
    # bool is an int in Python, not in JSON; the hook also serves subclasses (IntEnum, StrEnum),
    # which is why the value goes through `declared`
    if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
        raise TypeError(f"expected {declared.__name__}, got {type(value).__name__}")
    return declared(value)


# The reader -----------------------------------------------------------------------------------


async def serve_messages(
    stop_event: Event, read: Callable[[], Awaitable[bytes]], protocol: GuardedProtocol
) -> None:
    """Reads messages until end of input (or stop_event) and hands each to `protocol`."""
    framer = MessageFramer()
    while not stop_event.is_set():
        body = framer.next_body()
        if body is None:
            chunk = await read()
            if not chunk:
                return
            framer.feed(chunk)
            continue
        _dispatch(body, framer, protocol)
        # Like pygls' reader, which awaited a read per line: the handler task a message just
        # started gets to run before the next message is handled.
        await asyncio.sleep(0)


def _dispatch(body: bytes, framer: MessageFramer, protocol: GuardedProtocol) -> None:
    try:
        data = json.loads(body)
    except RecursionError:  # nested deeper than the parser follows: the message is lost whole
        log.error("lowerd: a %d-byte message nests too deep to parse; dropped", len(body))
        protocol.refuse(None, JsonRpcParseError("Parse error: the message nests too deep"))
        return
    except ValueError:
        value, rest = leading_json(body)
        framer.unread(rest)
        log.error(
            "lowerd: a %d-byte message body is not one JSON document (a wrong Content-Length?);"
            " looking for the next header",
            len(body),
        )
        if (msg_id := request_id(value)) is not None:
            mismatch = "Invalid Request: the Content-Length did not match the body"
            protocol.refuse(msg_id, JsonRpcInvalidRequest(mismatch))
        return
    protocol.receive(data)


class GuardedLanguageServer(LanguageServer):
    """A pygls LanguageServer whose stdio and TCP transports read with `serve_messages`."""

    protocol: GuardedProtocol

    def __init__(self, name: str, version: str, **kwargs: Any):
        kwargs.setdefault("protocol_cls", GuardedProtocol)
        kwargs.setdefault("converter_factory", strict_converter)
        super().__init__(name, version, **kwargs)

    def start_io(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        """pygls' `_start_io_async`, with this module's reader."""
        self._stop_event = Event()
        source = stdin or sys.stdin.buffer
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        read_some = getattr(source, "read1", source.read)  # what is there, not a full chunk

        async def read() -> bytes:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.thread_pool, read_some, _READ_CHUNK)

        try:
            asyncio.run(serve_messages(self._stop_event, read, self.protocol))
        except BrokenPipeError:
            log.error("lowerd: the connection to the client is lost; shutting down")
        except (KeyboardInterrupt, SystemExit):  # `exit` ends the process as in pygls
            pass
        finally:
            self.shutdown()  # type: ignore[no-untyped-call]  # pygls' shutdown is unannotated

    def start_tcp(self, host: str, port: int) -> None:
        """pygls' `start_tcp`, with this module's reader."""
        self._stop_event = stop_event = Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.protocol.set_writer(writer)

            async def read() -> bytes:
                try:
                    return await reader.read(_READ_CHUNK)
                except ConnectionError:  # a reset is the end of input too
                    return b""

            await serve_messages(stop_event, read, self.protocol)
            self.shutdown()  # type: ignore[no-untyped-call]  # pygls' shutdown is unannotated

        async def tcp_server() -> None:
            self._server = await asyncio.start_server(connection, host, port)
            async with self._server:
                await self._server.serve_forever()

        try:
            asyncio.run(tcp_server())
        except asyncio.CancelledError:
            log.debug("the TCP server was cancelled")
