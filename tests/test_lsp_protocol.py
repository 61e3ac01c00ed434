"""`lowerd serve` answers every request and outlives a client's framing mistakes.

The real server runs as a subprocess in a folder without a pyproject.toml (so it starts no build
workers and never loads torch); the tests write raw bytes to its stdin (or a TCP socket) and read
its replies with a small framing reader of their own, so that they can send what no LSP client
library would: invalid params, wrong Content-Lengths, a 1 TiB length. Every wait shares one
deadline (helpers.DEADLINE), a guard against a hang, never a measurement.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio

from lowerd.daemon.lsp_protocol import MessageFramer

from helpers import DEADLINE
from testkit.ports import free_port, open_when_listening

T = TypeVar("T")

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
ONE_TIB = 1 << 40


def frame(body: bytes, length: int | None = None) -> bytes:
    """A message as sent on the wire; `length` overrides the true Content-Length."""
    return b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length) + body


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}).encode()


class Wire:
    """One connection to the server: sends bytes, reads its messages until a reply arrives."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        server: asyncio.subprocess.Process,
        root: Path,
    ):
        self.reader, self.writer, self.server, self.root = reader, writer, server, root
        self.uri = (root / "model.py").as_uri()  # a file the hovers ask about
        self.deadline = asyncio.get_running_loop().time() + DEADLINE
        self.replies: dict[Any, dict[str, Any]] = {}

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    def request(self, msg_id: Any, method: str, params: Any = None, **extra: Any) -> None:
        message = {"id": msg_id, "method": method, **extra}
        if params is not None:
            message["params"] = params
        self.write(frame(encode(message)))

    def notify(self, method: str, params: Any) -> None:
        self.write(frame(encode({"method": method, "params": params})))

    async def reply(self, msg_id: Any) -> dict[str, Any]:
        """The server's reply to request `msg_id` (its own requests and notifications are
        skipped)."""
        await self.within(self.writer.drain())
        while msg_id not in self.replies:
            message = await self._read_message()
            if "method" not in message:
                self.replies[message.get("id")] = message
        return self.replies.pop(msg_id)

    async def error_code(self, msg_id: Any) -> int | None:
        return (await self.reply(msg_id)).get("error", {}).get("code")

    async def hover_works(self, msg_id: Any) -> None:
        """A valid hover gets a result (None: the folder has no lowerd config)."""
        self.request(msg_id, "textDocument/hover", _hover_params(self.uri))
        reply = await self.reply(msg_id)
        assert "error" not in reply and reply["result"] is None, reply

    async def within(self, step: Awaitable[T]) -> T:
        remaining = self.deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(step, max(remaining, 0))
        except TimeoutError:
            raise AssertionError(f"the server did not answer within {DEADLINE:.0f} s") from None

    async def _read_message(self) -> dict[str, Any]:
        header = await self.within(self.reader.readuntil(b"\r\n\r\n"))
        [length] = [
            int(line.split(b":", 1)[1])
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ]
        return json.loads(await self.within(self.reader.readexactly(length)))

    async def initialize(self) -> None:
        self.request(1, "initialize", {"capabilities": {}, "rootUri": self.root.as_uri()})
        assert "capabilities" in (await self.reply(1))["result"]
        self.notify("initialized", {})

    async def exits_cleanly(self) -> None:
        """shutdown, exit: the process ends with status 0."""
        self.request("shutdown", "shutdown")
        assert (await self.reply("shutdown"))["result"] is None
        self.notify("exit", None)
        await self.within(self.writer.drain())
        assert await self.within(self.server.wait()) == 0


def _hover_params(uri: Any, line: Any = 0) -> dict[str, Any]:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": 0}}


@asynccontextmanager
async def running_server(root: Path, *arguments: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`lowerd serve` in `root` (stdio pipes unless told --tcp), its stderr in root/server.log;
    killed if a test leaves it running."""
    pipe = None if "--tcp" in arguments else asyncio.subprocess.PIPE
    with open(root / "server.log", "wb") as log:
        server = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "lowerd", "serve", *arguments],
            stdin=pipe,
            stdout=pipe,
            stderr=log,
            cwd=root,
        )
    try:
        yield server
    finally:
        if server.returncode is None:
            server.kill()
        await server.wait()


@pytest_asyncio.fixture
async def wire(tmp_path: Path) -> AsyncIterator[Wire]:
    """An initialized server on stdio."""
    async with running_server(tmp_path) as server:
        assert server.stdin is not None and server.stdout is not None
        wire = Wire(server.stdout, server.stdin, server, tmp_path)
        await wire.initialize()
        yield wire


def e2e(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """A test of the real server process, run on the event loop."""
    return pytest.mark.e2e(pytest.mark.asyncio(test))


# Invalid requests get an error reply ------------------------------------------------------------


@e2e
async def test_requests_with_invalid_params_get_an_invalid_params_reply(wire: Wire) -> None:
    invalid = {
        "hover {}": ("textDocument/hover", {}),
        "hover textDocument null": (
            "textDocument/hover",
            {**_hover_params(wire.uri), "textDocument": None},
        ),
        "hover uri 5": ("textDocument/hover", _hover_params(5)),
        "hover line -1": ("textDocument/hover", _hover_params(wire.uri, line=-1)),
        "hover line '0'": ("textDocument/hover", _hover_params(wire.uri, line="0")),
        "codeLens {}": ("textDocument/codeLens", {}),
        "codeLens textDocument null": ("textDocument/codeLens", {"textDocument": None}),
        "codeLens uri 5": ("textDocument/codeLens", {"textDocument": {"uri": 5}}),
        "executeCommand without command": ("workspace/executeCommand", {}),
        "executeCommand arguments 5": (
            "workspace/executeCommand",
            {"command": "lowerd.report", "arguments": 5},
        ),
        # cattrs took a string for a sequence: "net" built targets n, e and t
        "executeCommand arguments 'net'": (
            "workspace/executeCommand",
            {"command": "lowerd.build", "arguments": "net"},
        ),
    }
    for number, (method, params) in enumerate(invalid.values()):
        wire.request(f"invalid-{number}", method, params)
    wire.request(99, "textDocument/hover")  # no params at all
    codes = {name: await wire.error_code(f"invalid-{n}") for n, name in enumerate(invalid)}
    assert codes == dict.fromkeys(invalid, INVALID_PARAMS)
    assert await wire.error_code(99) == INVALID_PARAMS
    # ... and the server goes on answering
    await wire.hover_works(100)
    wire.request(101, "textDocument/codeLens", {"textDocument": {"uri": wire.uri}})
    assert (await wire.reply(101))["result"] == []
    await wire.exits_cleanly()


@e2e
async def test_requests_without_a_usable_method_get_an_invalid_request_reply(wire: Wire) -> None:
    wire.write(frame(encode({"id": 10})))  # no method (and no result: not a response)
    wire.write(frame(encode({"id": 11, "method": 5, "params": {}})))
    wire.write(frame(json.dumps({"id": 12, "method": "shutdown"}).encode()))  # no "jsonrpc"
    assert [await wire.error_code(i) for i in (10, 11, 12)] == [INVALID_REQUEST] * 3
    await wire.hover_works(13)
    await wire.exits_cleanly()


@e2e
async def test_after_shutdown_requests_are_refused_and_exit_ends_the_process(wire: Wire) -> None:
    wire.request("down", "shutdown")
    assert (await wire.reply("down"))["result"] is None
    wire.request("late", "textDocument/hover", _hover_params(wire.uri))
    assert await wire.error_code("late") == INVALID_REQUEST  # LSP: InvalidRequest after shutdown
    wire.notify("exit", None)
    assert await wire.within(wire.server.wait()) == 0


@e2e
async def test_a_message_nested_too_deep_gets_a_parse_error_and_the_server_goes_on(
    wire: Wire,
) -> None:
    """200,000 nested `[`: json.loads raises RecursionError (pygls' reader died of it, and with
    it the server). A message that parses but nests deeper than cattrs or repr can follow is
    answered too."""
    wire.write(frame(b"[" * 200_000))
    reply = await wire.reply(None)
    assert reply["id"] is None and reply["error"]["code"] == PARSE_ERROR, reply  # `"id": null`
    deep = {"id": 61, "method": "textDocument/hover", "params": {"textDocument": {"uri": 1}}}
    deep["params"]["textDocument"]["uri"] = json.loads("[" * 900 + "]" * 900)
    wire.request(61, deep["method"], deep["params"])
    assert await wire.error_code(61) == INVALID_PARAMS
    wire.write(frame(b'{"jsonrpc": "2.0", "id": 62, "method": "x", "params": ' + b"[" * 200_000))
    assert await wire.error_code(None) == PARSE_ERROR
    await wire.hover_works(63)
    await wire.exits_cleanly()


# Framing mistakes cost one message ---------------------------------------------------------------


@e2e
async def test_a_too_short_content_length_costs_only_that_message(wire: Wire) -> None:
    body = encode({"id": 20, "method": "textDocument/hover", "params": _hover_params(wire.uri)})
    wire.write(frame(body, length=10))
    await wire.hover_works(21)  # pygls: glued to the rest of the body, never read
    await wire.hover_works(22)
    await wire.exits_cleanly()


@e2e
async def test_a_too_long_content_length_is_refused_and_the_next_message_read(wire: Wire) -> None:
    body = encode({"id": 30, "method": "textDocument/hover", "params": _hover_params(wire.uri)})
    wire.write(frame(body, length=len(body) + 40))  # swallows the start of the next message
    await wire.hover_works(31)
    assert await wire.error_code(30) == INVALID_REQUEST
    await wire.hover_works(32)
    await wire.exits_cleanly()


@e2e
async def test_a_one_tib_content_length_is_skipped_with_a_log_line(wire: Wire) -> None:
    wire.write(b"Content-Length: %d\r\n\r\n{}" % ONE_TIB)  # pygls: MemoryError, the server dies
    await wire.hover_works(40)
    wire.write(b"Content-Length: %s\r\n\r\n" % (b"9" * 5000))  # pygls: int() refuses, it dies
    await wire.hover_works(41)
    await wire.exits_cleanly()
    log = (wire.root / "server.log").read_text()
    assert f"Content-Length is {ONE_TIB} bytes, over the" in log


@e2e
async def test_tcp_transport_reads_with_the_same_guard(tmp_path: Path) -> None:
    """`lowerd serve --tcp` shares the reader: framing mistakes there cost one message too."""
    port = free_port()
    async with running_server(tmp_path, "--tcp", f"127.0.0.1:{port}") as server:
        reader, writer = await open_when_listening("127.0.0.1", port, DEADLINE)
        wire = Wire(reader, writer, server, tmp_path)
        await wire.initialize()
        wire.write(frame(encode({"id": 50, "method": "textDocument/hover", "params": {}}), 10))
        wire.write(b"Content-Length: %d\r\n\r\n" % ONE_TIB)
        wire.write(b"x" * 100_000 + b"\r\n")  # pygls: over StreamReader's line limit, drops us
        await wire.hover_works(51)
        wire.request(52, "textDocument/codeLens", {"textDocument": None})
        assert await wire.error_code(52) == INVALID_PARAMS
        await wire.exits_cleanly()


# The framer alone --------------------------------------------------------------------------------


def _bodies(framer: MessageFramer) -> list[bytes]:
    bodies = []
    while (body := framer.next_body()) is not None:
        bodies.append(body)
    return bodies


def test_framer_reads_messages_split_at_any_byte(caplog: pytest.LogCaptureFixture) -> None:
    bodies = [encode({"id": n, "method": "m", "params": {"n": "é" * n}}) for n in range(3)]
    stream = b"".join(frame(b) for b in bodies)
    stream += b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n" + frame(b"{}")
    framer = MessageFramer()
    read: list[bytes] = []
    with caplog.at_level(logging.ERROR):
        for byte in range(len(stream)):
            framer.feed(stream[byte : byte + 1])
            read.extend(_bodies(framer))
    assert read == [*bodies, b"{}"]
    assert not caplog.records  # a Content-Type header first is no framing mistake


def test_framer_skips_garbage_and_over_cap_lengths_to_the_next_header(
    caplog: pytest.LogCaptureFixture,
) -> None:
    garbage = b"garbage\r\n\r\n"
    over_cap = b"x" * 101
    no_blank_line = b"Content-Length: 12\r\nno blank line, a body\r\n"  # not a header block
    framer = MessageFramer(max_length=100)
    framer.feed(garbage + b"Content-Length: 101\r\n\r\n" + over_cap + no_blank_line)
    framer.feed(frame(b'{"ok": true}'))
    with caplog.at_level(logging.ERROR):
        assert _bodies(framer) == [b'{"ok": true}']
    skipped = len(garbage) + len(over_cap) + len(no_blank_line)
    assert [r.getMessage() for r in caplog.records] == [
        "lowerd: a message's Content-Length is 101 bytes, over the 100-byte limit: it is "
        "skipped, with what follows up to the next header",
        f"lowerd: skipped {skipped} bytes that were not a message, up to the next header",
    ]
