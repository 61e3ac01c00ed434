"""`lowerd serve`: the language server made from its handlers (daemon/handlers.py) and started on
the client's pipes or on TCP."""

from __future__ import annotations

import os
import sys
from typing import BinaryIO

from lowerd.daemon.handlers import COMMANDS, FEATURES
from lowerd.daemon.server import LowerdServer


def create_server(workers: int = 2) -> LowerdServer:
    server = LowerdServer(workers)
    for method, options, handler in FEATURES:
        server.feature(method, options)(handler)
    for name, command in COMMANDS:
        server.command(name)(command)
    return server


def serve(tcp: tuple[str, int] | None = None, workers: int = 2) -> int:
    server = create_server(workers)
    if tcp is not None:
        server.start_tcp(*tcp)
        return 0
    stdin, stdout = _protocol_streams()
    server.start_io(stdin, stdout)
    return 0


def _protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """The client's pipes, kept for the protocol alone: fd 1 then points at stderr and fd 0 at
    /dev/null, so that nothing else (a library's print, a child process) can corrupt or steal
    LSP messages."""
    stdin = os.fdopen(os.dup(0), "rb")
    stdout = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return stdin, stdout
