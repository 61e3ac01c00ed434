"""How many requests one client may have in flight on the daemon's socket at once.

Each request that reads files or a config does it on a thread of the event loop's executor,
which every client shares: one client with many requests that block (a config that is a FIFO,
before such reads refused it; a file on a hung network mount) would take every thread, and a
normal `lowerd build` would wait behind them for good. A client is the process at the other end
of the socket (its pid, from SO_PEERCRED); past its limit, its next request waits for one of its
own to end, holding no thread while it waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

log = logging.getLogger(__name__)

# Below the executor's threads (min(32, cores + 4), at least 5): one client leaves one free.
MAX_REQUESTS_PER_CLIENT = 4


class ClientSlots:
    def __init__(self, limit: int = MAX_REQUESTS_PER_CLIENT):
        self.limit = limit
        self._slots: dict[int, asyncio.Semaphore] = {}
        self._holders: dict[int, int] = {}  # requests of each pid, waiting or in flight

    @asynccontextmanager
    async def slot(self, pid: int) -> AsyncIterator[None]:
        """Held while one request of `pid` is served; waits while `limit` others are."""
        semaphore = self._slots.setdefault(pid, asyncio.Semaphore(self.limit))
        self._holders[pid] = self._holders.get(pid, 0) + 1
        try:
            if semaphore.locked():
                log.warning(
                    "client pid %d has %d requests in flight, the most one client may: "
                    "its next waits for one of them to end",
                    pid,
                    self.limit,
                )
            async with semaphore:
                yield
        finally:
            self._holders[pid] -= 1
            if not self._holders[pid]:
                del self._holders[pid], self._slots[pid]
