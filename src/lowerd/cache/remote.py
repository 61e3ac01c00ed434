"""The remote tier: entries on a redis server that a team's machines and CI share.

Values are whole entries (cache/entry.py) under `lowerd:v<schema>:<kind>:<key>`, so a value is
checked against the name it is read under, exactly as a local file is: a damaged, truncated or
swapped value is a miss, counted and reported, never used.

The tier fails open and says so. The first error (refused, unreachable, slower than `timeout`,
out of memory, a wrong password) turns it off for the rest of this tier's life — one build — and
`status` tells why; the next build tries again. Reads wait at most `timeout`; writes go through a
background thread so the build never waits for them, and `finish` waits for what is still queued
only while uploads keep completing, up to a bound.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .entry import DEFAULT_KIND, SCHEMA, check_name, decode_entry, entry_head

PREFIX = f"lowerd:v{SCHEMA}:"
# Queued uploads beyond this many bytes are dropped (and counted) rather than held in memory.
_MAX_QUEUED_BYTES = 512 * 1024**2
# `finish` waits for queued uploads at most this long, however steadily they complete.
_MAX_FINISH_SECONDS = 60.0


@dataclass
class RemoteCounts:
    """What one build (or, summed, this machine) asked of the remote tier."""

    hits: int = 0  # entries read, verified and used
    misses: int = 0  # not there
    puts: int = 0  # entries written
    errors: int = 0  # failed commands, values that failed verification, uploads dropped

    def add(self, other: RemoteCounts) -> RemoteCounts:
        return RemoteCounts(
            self.hits + other.hits,
            self.misses + other.misses,
            self.puts + other.puts,
            self.errors + other.errors,
        )

    def to_json(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "puts": self.puts, "errors": self.errors}

    @classmethod
    def from_json(cls, raw: Any) -> RemoteCounts:
        raw = raw if isinstance(raw, dict) else {}
        fields = ("hits", "misses", "puts", "errors")
        return cls(*(int(raw.get(name, 0)) for name in fields))


@dataclass(frozen=True)
class RemoteReport:
    """How the remote tier served one build: "ok", "read-only" or "unavailable: <reason>",
    its counts, and each problem in words (a rejected value, uploads not sent)."""

    status: str
    counts: RemoteCounts
    problems: tuple[str, ...] = ()
    url: str = ""  # without its password

    @property
    def available(self) -> bool:
        return not self.status.startswith("unavailable")

    def warnings(self) -> list[str]:
        """What a person must hear: the tier is down, or something it held was not used."""
        lines = list(self.problems)
        if not self.available:
            reason = self.status.removeprefix("unavailable: ")
            down = f"remote cache {self.url} unavailable ({reason}); built with the local cache"
            lines.insert(0, down)
        return lines


@dataclass
class _Uploads:
    queue: deque[tuple[str, bytes]] = field(default_factory=deque)
    queued_bytes: int = 0
    sending: int = 0  # taken from the queue, not yet answered
    thread: threading.Thread | None = None
    pid: int = 0  # the process the thread runs in: a forked child starts its own


class RemoteTier:
    """Entries on redis at `url` (redis-py's URL forms: redis://, rediss://, unix://)."""

    def __init__(
        self,
        url: str,
        *,
        display_url: str,
        writable: bool = True,
        ttl: int | None = None,
        max_entry_bytes: int = 64 * 1024**2,
        timeout: float = 2.0,
    ) -> None:
        self.url = url
        self.display_url = display_url  # without its password
        self.writable = writable
        self.ttl = ttl
        self.max_entry_bytes = max_entry_bytes
        self.timeout = timeout
        self.counts = RemoteCounts()
        self.used = False  # a command was sent: only then does the status say anything
        self.problems: list[str] = []
        self._down: str | None = None
        self._client: Any = None
        self._client_pid = 0
        self._lock = threading.Condition()
        self._uploads = _Uploads()

    @property
    def status(self) -> str:
        if self._down is not None:
            return f"unavailable: {self._down}"
        return "ok" if self.writable else "read-only"

    def get(self, key: str, kind: str = DEFAULT_KIND) -> bytes | None:
        """The entry's payload if redis has it and it verifies under this key; else None."""
        check_name(key, kind)
        if self._down is not None:
            return None
        try:
            data = self._redis().get(_name(key, kind))
        except Exception as error:  # noqa: BLE001  # redis-py's errors and the socket's
            self._give_up(error)
            return None
        with self._lock:
            if data is None:
                self.counts.misses += 1
                return None
            payload = decode_entry(data, key, kind)
            if payload is None:
                self.counts.errors += 1
                self.problems.append(
                    f"the {kind} {key[:12]}… on {self.display_url} failed verification"
                    " (damaged or stored under another key); not used"
                )
                return None
            self.counts.hits += 1
        return payload

    def put_later(self, key: str, payload: bytes, kind: str = DEFAULT_KIND) -> None:
        """Queue the entry for upload; the build goes on at once."""
        check_name(key, kind)
        if not self.writable or self._down is not None:
            return
        value = entry_head(key, kind, payload) + payload
        with self._lock:
            if len(payload) > self.max_entry_bytes:
                self.problems.append(
                    f"the {kind} {key[:12]}… ({len(payload)} bytes) is larger than"
                    f" cache_remote_max_entry_size ({self.max_entry_bytes} bytes); not sent"
                )
                return
            if self._uploads.queued_bytes + len(value) > _MAX_QUEUED_BYTES:
                self.counts.errors += 1
                return
            self._uploads.queue.append((_name(key, kind), value))
            self._uploads.queued_bytes += len(value)
            self._start_uploading()
            self._lock.notify_all()

    def finish(self) -> RemoteReport:
        """Wait for queued uploads while they keep completing (each within `timeout`, all
        within a bound); what is left is counted as dropped. The report of this build."""
        deadline = time.monotonic() + _MAX_FINISH_SECONDS
        with self._lock:
            while self._pending() and self._down is None:
                if not self._wait_for_progress(self._pending(), deadline):
                    break
            left = len(self._uploads.queue)
            self._uploads.queue.clear()
            self._uploads.queued_bytes = 0
            if left:
                self.counts.errors += left
                self.problems.append(f"{left} entries not sent to {self.display_url} in time")
            counts = RemoteCounts(**vars(self.counts))
            return RemoteReport(self.status, counts, tuple(self.problems), self.display_url)

    def _wait_for_progress(self, pending: int, deadline: float) -> bool:
        """Whether an upload completed (or the tier gave up) within `timeout` and the bound."""
        return (
            self._lock.wait_for(
                lambda: self._pending() < pending or self._down is not None,
                timeout=min(self.timeout, max(0.0, deadline - time.monotonic())),
            )
            and time.monotonic() < deadline
        )

    def server_info(self) -> dict[str, Any]:
        """What the server says of its memory (for `lowerd cache stats`); raises its error."""
        info = self._redis().info("memory")
        return {key: info.get(key) for key in ("used_memory", "maxmemory", "maxmemory_policy")}

    def _pending(self) -> int:
        return len(self._uploads.queue) + self._uploads.sending

    def _start_uploading(self) -> None:
        uploads = self._uploads
        if uploads.thread is not None and uploads.pid == os.getpid():
            return
        uploads.pid = os.getpid()
        uploads.sending = 0
        uploads.thread = threading.Thread(target=self._upload, name="lowerd-remote", daemon=True)
        uploads.thread.start()

    def _upload(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: bool(self._uploads.queue))
                name, value = self._uploads.queue.popleft()
                self._uploads.queued_bytes -= len(value)
                self._uploads.sending += 1
            try:
                if self._down is None:
                    self._redis().set(name, value, ex=self.ttl)
                    with self._lock:
                        self.counts.puts += 1
            except Exception as error:  # noqa: BLE001  # redis-py's errors and the socket's
                self._give_up(error)
            finally:
                with self._lock:
                    self._uploads.sending -= 1
                    self._lock.notify_all()

    def _redis(self) -> Any:
        # A forked worker must not share its parent's sockets: one client per process.
        if self._client is None or self._client_pid != os.getpid():
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            self._client = redis.Redis.from_url(
                self.url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                # One try: a server that is down costs one timeout per build, not a retry loop.
                retry=Retry(NoBackoff(), 0),
            )
            self._client_pid = os.getpid()
        self.used = True
        return self._client

    def _give_up(self, error: BaseException) -> None:
        with self._lock:
            self.counts.errors += 1
            if self._down is None:
                self._down = error_reason(error)
            self._uploads.queue.clear()
            self._uploads.queued_bytes = 0
            self._lock.notify_all()


def _name(key: str, kind: str) -> str:
    return f"{PREFIX}{kind}:{key}"


def error_reason(error: BaseException) -> str:
    """The error in one short line: its class (OutOfMemoryError, TimeoutError, ...) and redis-py's
    words, which name the host but no password."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= 200 else text[:199] + "…"
