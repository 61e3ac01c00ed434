"""The messages between a build worker, its fork server and the supervisor that runs them,
typed: each has to_frame() (the msgpack map on the wire) and a parser from it. The wire format is
unchanged; dicts exist only as frames. The daemon's private-socket requests and answers are
daemon/rpc_messages.py's.

A build worker's event pipe (worker/forkserver.py writes; the supervisor, worker/workers.py,
reads), in this order:

    {"type": "progress", "stage", "detail"}...  {"type": "partitioned", "method", "report"}...
    {"type": "libraries", "modules"}  {"type": "peak_rss", "bytes"}  {"type": "result", "result"}

The fork server's channel (worker/fork_server_client.py <-> worker/forkserver.py, one message
a packet):

    to it:    {"op": "build", ...} (WorkerJob, with the event pipe's fd)
              {"op": "preload", "modules"}
    from it:  {"op": "ready"}  {"op": "started", "id", "pid"}  {"op": "exited", "id", "status"}
              {"op": "preloaded", "imported", "cold", "tainted"}

What a worker is asked to build, whoever supervises it (the daemon's pool through the fork
server, or the in-process CLI's and the Ray task's through forks of their own): WorkerJob.

Nothing here imports asyncio or torch: the CLI client reads these frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

from lowerd.project.report_model import MethodReport
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

Frame = dict[str, Any]


class ProtocolError(Exception):
    """A frame that is not the message it should be; the message names the field."""


# What a build worker is asked ---------------------------------------------------------------


@dataclass(frozen=True)
class WorkerJob:
    """One target to build in a forked worker, and the limits its supervisor holds it to
    (worker/workers.py WorkerPool): what the daemon, the in-process CLI and the Ray task submit,
    and, with the pool's `id`, the fork server's "build" message."""

    config: str  # the project's pyproject.toml
    target: str
    _: KW_ONLY
    timeout: float | None = None  # seconds: past it the supervisor kills the worker
    memory_limit: int | None = None  # bytes of address space (RLIMIT_AS)
    use_cache: bool = True
    backends: tuple[str, ...] | None = None  # overrides the config's (the editor's, a compare's)
    # Where its outputs and build record go instead of the config's out_dir: a compare's
    # private folder (project/compare.py), a Ray task's own (cli/ray_task.py).
    out_dir: str | None = None
    warm_libraries: bool = False  # report the libraries it imported (for the fork server)
    id: int = 0  # the pool's number for the build, on the fork server's channel

    def to_frame(self) -> Frame:
        return {
            "op": "build",
            "id": self.id,
            "config": self.config,
            "target": self.target,
            "timeout": self.timeout,
            "memory_limit": self.memory_limit,
            "use_cache": self.use_cache,
            "backends": list(self.backends) if self.backends else None,
            "warm_libraries": self.warm_libraries,
            "out_dir": self.out_dir,
        }

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> WorkerJob:
        backends = frame.get("backends")
        return cls(
            config=str(frame["config"]),
            target=str(frame["target"]),
            id=int(frame.get("id") or 0),
            timeout=frame.get("timeout"),
            memory_limit=frame.get("memory_limit"),
            use_cache=bool(frame.get("use_cache", True)),
            backends=tuple(backends) if backends else None,
            warm_libraries=bool(frame.get("warm_libraries", False)),
            out_dir=str(frame["out_dir"]) if frame.get("out_dir") else None,
        )


# Worker events (worker -> daemon or in-process CLI, on the event pipe) -------------------------


@dataclass(frozen=True)
class ProgressEvent:
    stage: str  # load, quantize, export, partition, preprocess, emit, write
    detail: str | None = None  # the method during export, "3/42" during preprocess

    def to_frame(self) -> Frame:
        return {"type": "progress", "stage": self.stage, "detail": self.detail}


@dataclass(frozen=True)
class PartitionedEvent:
    """A method's report as soon as it is partitioned (or, provisional, the last build's)."""

    method: str
    report: MethodReport

    def to_frame(self) -> Frame:
        return {"type": "partitioned", "method": self.method, "report": encode(self.report)}


@dataclass(frozen=True)
class LibrariesEvent:
    """Installed libraries the build imported: the fork server imports them for the next."""

    modules: tuple[str, ...]

    def to_frame(self) -> Frame:
        return {"type": "libraries", "modules": list(self.modules)}


@dataclass(frozen=True)
class PeakRssEvent:
    bytes: int

    def to_frame(self) -> Frame:
        return {"type": "peak_rss", "bytes": self.bytes}


@dataclass(frozen=True)
class ResultEvent:
    """The last event: the target's result."""

    result: TargetResult

    def to_frame(self) -> Frame:
        return {"type": "result", "result": encode(self.result)}


WorkerEvent = ProgressEvent | PartitionedEvent | LibrariesEvent | PeakRssEvent | ResultEvent


def parse_event(frame: Mapping[str, Any]) -> WorkerEvent:
    """A worker's frame as its event; ProtocolError for one no worker sends."""
    kind = frame.get("type")
    try:
        if kind == "progress":
            detail = frame.get("detail")
            return ProgressEvent(str(frame["stage"]), None if detail is None else str(detail))
        if kind == "partitioned":
            return PartitionedEvent(str(frame["method"]), decode(MethodReport, frame["report"]))
        if kind == "libraries":
            return LibrariesEvent(tuple(str(m) for m in frame.get("modules") or []))
        if kind == "peak_rss":
            return PeakRssEvent(int(frame["bytes"]))
        if kind == "result":
            return ResultEvent(decode(TargetResult, frame["result"]))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ProtocolError(f"malformed {kind} event: {error!r}") from error
    raise ProtocolError(f"type: unknown worker event {kind!r}")


# The fork server's channel (worker/fork_server_client.py <-> worker/forkserver.py) -------------


@dataclass(frozen=True)
class PreloadRequest:
    """Import these installed libraries between builds, so that the next forks start with them
    (worker/libraries.py)."""

    modules: tuple[str, ...]
    op: Literal["preload"] = field(default="preload", init=False)

    def to_frame(self) -> Frame:
        return {"op": "preload", "modules": list(self.modules)}

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> PreloadRequest:
        return cls(tuple(str(m) for m in frame.get("modules") or []))


ForkServerRequest = WorkerJob | PreloadRequest


def parse_fork_server_request(raw: object) -> ForkServerRequest:
    """A message to the fork server as its type; ProtocolError for one no daemon sends."""
    frame = _map(raw)
    op = frame.get("op")
    try:
        if op == "build":
            return WorkerJob.from_frame(frame)
        if op == "preload":
            return PreloadRequest.from_frame(frame)
    except (KeyError, TypeError, ValueError) as error:
        raise ProtocolError(f"malformed {op} request: {error!r}") from error
    raise ProtocolError(f"op: unknown fork server request {op!r}")


@dataclass(frozen=True)
class ReadyMessage:
    """Warm (torch, ExecuTorch imported, one model lowered): from now on it reads its channel."""

    op: Literal["ready"] = field(default="ready", init=False)

    @property
    def id(self) -> int:
        return 0

    def to_frame(self) -> Frame:
        return {"op": "ready"}

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> ReadyMessage:
        return cls()


@dataclass(frozen=True)
class StartedMessage:
    """The worker of build `id` was forked: its pid, which the daemon kills to end the build."""

    id: int
    pid: int
    op: Literal["started"] = field(default="started", init=False)

    def to_frame(self) -> Frame:
        return {"op": "started", "id": self.id, "pid": self.pid}

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> StartedMessage:
        return cls(int(frame["id"]), int(frame["pid"]))


@dataclass(frozen=True)
class ExitedMessage:
    """The worker of build `id` ended: its wait() status (workers.exit_message reads it)."""

    id: int
    status: int
    op: Literal["exited"] = field(default="exited", init=False)

    def to_frame(self) -> Frame:
        return {"op": "exited", "id": self.id, "status": self.status}

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> ExitedMessage:
        return cls(int(frame["id"]), int(frame["status"]))


@dataclass(frozen=True)
class PreloadedMessage:
    """A preload's answer: how many of the libraries it imported, those it left cold (their
    import would start a thread a fork copies), and whether it has such a thread anyway."""

    imported: int
    cold: tuple[str, ...] = ()
    tainted: bool = False
    op: Literal["preloaded"] = field(default="preloaded", init=False)

    @property
    def id(self) -> int:
        return 0

    def to_frame(self) -> Frame:
        return {
            "op": "preloaded",
            "imported": self.imported,
            "cold": list(self.cold),
            "tainted": self.tainted,
        }

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> PreloadedMessage:
        cold = tuple(str(m) for m in frame.get("cold") or [])
        return cls(int(frame.get("imported") or 0), cold, bool(frame.get("tainted", False)))


ForkServerMessage = ReadyMessage | StartedMessage | ExitedMessage | PreloadedMessage

_FORK_SERVER_MESSAGES: dict[str, type[ForkServerMessage]] = {
    "ready": ReadyMessage,
    "started": StartedMessage,
    "exited": ExitedMessage,
    "preloaded": PreloadedMessage,
}


def parse_fork_server_message(raw: object) -> ForkServerMessage:
    """A message from the fork server as its type; ProtocolError for one it never sends."""
    frame = _map(raw)
    kind = _FORK_SERVER_MESSAGES.get(str(frame.get("op")))
    if kind is None:
        raise ProtocolError(f"op: unknown fork server message {frame.get('op')!r}")
    try:
        return kind.from_frame(frame)
    except (KeyError, TypeError, ValueError) as error:
        raise ProtocolError(f"malformed {frame.get('op')} message: {error!r}") from error


def _map(raw: object) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ProtocolError(f"expected a map, got {type(raw).__name__}")
    return raw
