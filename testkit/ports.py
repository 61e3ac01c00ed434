"""TCP ports on the loopback interface: a free one for a server a test or a bench starts, and a
connection to a server once it listens there."""

from __future__ import annotations

import asyncio
import socket

_RETRY_SECONDS = 0.05


def free_port() -> int:
    """A port nothing listens on now; another process may take it before the server binds it,
    so a caller that can retry does."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def open_when_listening(
    host: str, port: int, deadline: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to a server that says nothing once it listens (`lowerd serve --tcp`): tried
    again until it accepts, polled since there is no event to wait for; fails after `deadline`
    seconds, a guard against a hang."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + deadline
    while True:
        try:
            return await asyncio.open_connection(host, port)
        except OSError as refused:
            if loop.time() > give_up:
                what = f"nothing listened on {host}:{port} within {deadline:.0f} s"
                raise AssertionError(what) from refused
            await asyncio.sleep(_RETRY_SECONDS)
