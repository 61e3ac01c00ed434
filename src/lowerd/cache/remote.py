"""The remote tier: entries on a redis server that a team's machines and CI share.

Values are whole entries (cache/entry.py) under `lowerd:v<schema>:<kind>:<key>`, so a value is
checked against the name it is read under, exactly as a local file is: a damaged, truncated or
swapped value is a miss, counted and reported, never used. With a signing key the entries this
machine puts are signed; with a verify key (or a signing key, whose public half it is) only
entries signed for their name are taken (cache/signing.py). A value larger than the cap is
neither sent nor taken: a read asks for at most the cap's worth of bytes.

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
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from .entry import DEFAULT_KIND, MAX_HEAD_SIZE, SCHEMA, check_name, decode_entry, entry_head
from .location import format_size
from .signing import (
    REFUSALS,
    SIGNED_HEAD_SIZE,
    EntrySigner,
    EntryVerifier,
    without_signature,
)

PREFIX = f"lowerd:v{SCHEMA}:"
# Queued uploads beyond this many bytes are dropped (and counted) rather than held in memory.
_MAX_QUEUED_BYTES = 512 * 1024**2
# `finish` waits for queued uploads at most this long, however steadily they complete.
_MAX_FINISH_SECONDS = 60.0
# What a reader trusts without a verify key: whoever can write the redis decides the bytes.
ANY_WRITER = "any writer"
_TOO_LARGE = "larger than the cap"


@dataclass
class RemoteCounts:
    """What one build (or, summed, this machine) asked of the remote tier."""

    hits: int = 0  # entries read, verified and used
    misses: int = 0  # not there
    puts: int = 0  # entries written
    errors: int = 0  # failed commands, values that failed verification, uploads dropped
    # Whole values not taken: unsigned or not signed by the verify key, or larger than the cap.
    rejected: int = 0

    def add(self, other: RemoteCounts) -> RemoteCounts:
        return RemoteCounts(*(a + b for a, b in zip(_values(self), _values(other), strict=True)))

    def to_json(self) -> dict[str, int]:
        return dict(zip(_COUNTS, _values(self), strict=True))

    @classmethod
    def from_json(cls, raw: Any) -> RemoteCounts:
        raw = raw if isinstance(raw, dict) else {}
        return cls(*(int(raw.get(name, 0)) for name in _COUNTS))


_COUNTS = ("hits", "misses", "puts", "errors", "rejected")


def _values(counts: RemoteCounts) -> tuple[int, ...]:
    return tuple(getattr(counts, name) for name in _COUNTS)


@dataclass(frozen=True)
class RemoteReport:
    """How the remote tier served one build: "ok", "read-only" or "unavailable: <reason>",
    its counts, and each problem in words (a rejected value, uploads not sent)."""

    status: str
    counts: RemoteCounts
    problems: tuple[str, ...] = ()
    url: str = ""  # without its password
    trust: str = ANY_WRITER  # or "ed25519 SHA256:...": the key every entry taken is signed by

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
        signer: EntrySigner | None = None,
        verifier: EntryVerifier | None = None,
    ) -> None:
        self.url = url
        self.display_url = display_url  # without its password
        self.writable = writable
        self.ttl = ttl
        self.max_entry_bytes = max_entry_bytes
        self.timeout = timeout
        self.signer = signer
        # A writer takes only what its own key signed, unless told which key to trust.
        self.verifier = verifier or (signer.verifier() if signer is not None else None)
        self.counts = RemoteCounts()
        self.used = False  # a command was sent: only then does the status say anything
        self.problems: list[str] = []
        self._rejected: Counter[str] = Counter()  # values not taken, by why: said once a build
        self._down: str | None = None
        self._client: Any = None
        self._client_pid = 0
        self._lock = threading.Condition()
        self._uploads = _Uploads()

    @property
    def trust(self) -> str:
        """Whose entries this machine takes: the verify key's signer's, or any writer's."""
        return f"ed25519 {self.verifier.fingerprint}" if self.verifier else ANY_WRITER

    @property
    def status(self) -> str:
        if self._down is not None:
            return f"unavailable: {self._down}"
        return "ok" if self.writable else "read-only"

    def get(self, key: str, kind: str = DEFAULT_KIND) -> bytes | None:
        """The entry's payload if redis has it, this machine trusts its signer, it is within the
        cap and it verifies under this key; else None."""
        check_name(key, kind)
        if self._down is not None:
            return None
        limit = self._max_value_bytes()
        try:
            # At most one byte past the cap comes over the wire, however large the value is.
            data = self._redis().getrange(_name(key, kind), 0, limit)
        except Exception as error:  # noqa: BLE001  # redis-py's errors and the socket's
            self._give_up(error)
            return None
        with self._lock:
            if not data:  # GETRANGE's answer for a missing key (an empty value is no entry)
                self.counts.misses += 1
                return None
            payload = self._payload(data, key, kind, too_large=len(data) > limit)
            if payload is not None:
                self.counts.hits += 1
            return payload

    def _payload(self, data: bytes, key: str, kind: str, too_large: bool) -> bytes | None:
        """The payload of a value read under (key, kind), or None, counted and said."""
        if too_large:
            self._reject(_TOO_LARGE)
            return None
        if self.verifier is None:
            entry = without_signature(data)
        else:
            opened = self.verifier.open(key, kind, data)
            if isinstance(opened, str):
                self._reject(opened)
                return None
            entry = opened
        payload = decode_entry(entry, key, kind)
        if payload is None:
            self.counts.errors += 1
            self.problems.append(
                f"the {kind} {key[:12]}… on {self.display_url} failed verification"
                " (damaged or stored under another key); not used"
            )
        elif len(payload) > self.max_entry_bytes:
            self._reject(_TOO_LARGE)
            return None
        return payload

    def _reject(self, why: str) -> None:
        self.counts.rejected += 1
        self._rejected[why] += 1

    def _max_value_bytes(self) -> int:
        return self.max_entry_bytes + SIGNED_HEAD_SIZE + MAX_HEAD_SIZE

    def put_later(self, key: str, payload: bytes, kind: str = DEFAULT_KIND) -> None:
        """Queue the entry for upload; the build goes on at once."""
        check_name(key, kind)
        if not self.writable or self._down is not None:
            return
        value = entry_head(key, kind, payload) + payload
        if self.signer is not None:
            value = self.signer.sign(key, kind, value)
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
            problems = (*self.problems, *self._rejections())
            return RemoteReport(self.status, counts, problems, self.display_url, self.trust)

    def _rejections(self) -> list[str]:
        """A line per reason values were not taken, however many there were."""
        lines = []
        large = self._rejected[_TOO_LARGE]
        if large:
            cap = format_size(self.max_entry_bytes)
            lines.append(
                f"{_entries(large)} on {self.display_url} larger than"
                f" cache_remote_max_entry_size ({cap}); not taken"
            )
        untrusted = [(self._rejected[why], why) for why in REFUSALS if self._rejected[why]]
        if untrusted:
            details = ", ".join(f"{n} {why}" for n, why in untrusted)
            lines.append(
                f"{_entries(sum(n for n, _ in untrusted))} on {self.display_url} not signed by"
                f" {self.trust} ({details}); not used"
            )
        return lines

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


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def _name(key: str, kind: str) -> str:
    return f"{PREFIX}{kind}:{key}"


def error_reason(error: BaseException) -> str:
    """The error in one short line: its class (OutOfMemoryError, TimeoutError, ...) and redis-py's
    words, which name the host but no password."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= 200 else text[:199] + "…"
