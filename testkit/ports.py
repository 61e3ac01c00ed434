"""A free TCP port on the loopback interface, for a server a test or a bench starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now; another process may take it before the server binds it,
    so a caller that can retry does."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
