"""Every message the daemon's processes exchange, typed: each has to_frame() (the msgpack map on
the wire) and a parser from it. The wire format is unchanged; dicts exist only as frames.

The private socket (daemon/rpc.py; cli/daemon_client.py), one request per connection:

    build   {"op": "build", "config", "targets", "use_cache", "jobs"}
            -> {"type": "progress", "target", "stage", "detail"}...
            -> {"type": "final", "document", "outcome", "message"}
    compare {"op": "compare", "config", "target", "backends", "use_cache"}
            -> progress... -> final (the document: project/compare_result.py CompareResult)
    status  {"op": "status"} -> {"type": "status", "status", "builds", "peaks"}
    stop    {"op": "stop"}   -> {"type": "stopping"}
    refused, malformed or unknown -> {"type": "error", "message"}

A build worker's event pipe (worker/forkserver.py writes; worker/workers.py and, in-process,
cli/build_command.py read), in this order:

    {"type": "progress", "stage", "detail"}...  {"type": "partitioned", "method", "report"}...
    {"type": "libraries", "modules"}  {"type": "peak_rss", "bytes"}  {"type": "result", "result"}

The fork server's channel (worker/workers.py <-> worker/forkserver.py, one message a packet):

    to it:    {"op": "build", ...} (WorkerJob, with the event pipe's fd)
              {"op": "preload", "modules"}
    from it:  {"op": "ready"}  {"op": "started", "id", "pid"}  {"op": "exited", "id", "status"}
              {"op": "preloaded", "imported", "cold", "tainted"}

What a worker is asked to build (the fork server's "build" message, and cli/build_command.py's
in-process fork): WorkerJob.

Nothing here imports asyncio or torch: the CLI client reads these frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lowerd.project.batch import Outcome
from lowerd.project.report_model import MethodReport
from lowerd.project.result import TargetResult

Frame = dict[str, Any]

_OUTCOMES: tuple[Outcome, ...] = ("ok", "target_failed", "usage")


class ProtocolError(Exception):
    """A frame that is not the message it should be; the message names the field."""


# Requests (client -> daemon) ------------------------------------------------------------------


@dataclass(frozen=True)
class BuildCall:
    """A client's `lowerd build`, every field checked (rpc.parse_request)."""

    config: str  # the project's pyproject.toml
    targets: tuple[str, ...] = ()  # none: all of them
    use_cache: bool = True
    jobs: int = 1
    op: Literal["build"] = field(default="build", init=False)

    def to_frame(self) -> Frame:
        return {
            "op": "build",
            "config": self.config,
            "targets": list(self.targets),
            "use_cache": self.use_cache,
            "jobs": self.jobs,
        }


@dataclass(frozen=True)
class CompareCall:
    """A client's `lowerd compare`: the target built once per backend (every field checked by
    rpc.parse_request); answered like a build, the final frame's document being the compare's
    (project/compare_result.py)."""

    config: str  # the project's pyproject.toml
    target: str
    backends: tuple[str, ...] = ()  # none: every known backend
    use_cache: bool = True
    op: Literal["compare"] = field(default="compare", init=False)

    def to_frame(self) -> Frame:
        return {
            "op": "compare",
            "config": self.config,
            "target": self.target,
            "backends": list(self.backends),
            "use_cache": self.use_cache,
        }


@dataclass(frozen=True)
class StatusCall:
    op: Literal["status"] = field(default="status", init=False)

    def to_frame(self) -> Frame:
        return {"op": "status"}


@dataclass(frozen=True)
class StopCall:
    op: Literal["stop"] = field(default="stop", init=False)

    def to_frame(self) -> Frame:
        return {"op": "stop"}


Request = BuildCall | CompareCall | StatusCall | StopCall


# Replies (daemon -> client) -------------------------------------------------------------------


@dataclass(frozen=True)
class ProgressFrame:
    """A stage of one target's build, streamed while the request runs."""

    target: str
    stage: str
    detail: str | None = None

    def to_frame(self) -> Frame:
        return {
            "type": "progress",
            "target": self.target,
            "stage": self.stage,
            "detail": self.detail,
        }

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> ProgressFrame:
        return cls(str(frame.get("target", "")), str(frame.get("stage", "")), frame.get("detail"))


@dataclass(frozen=True)
class FinalFrame:
    """A build request's answer: the JSON document (lowerd build --json's) and how the build
    ended, or, when no document was made (a config error), the message to print."""

    document: dict[str, Any] | None
    outcome: Outcome
    message: str | None = None

    def to_frame(self) -> Frame:
        return {
            "type": "final",
            "document": self.document,
            "outcome": self.outcome,
            "message": self.message,
        }

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> FinalFrame:
        outcome = frame.get("outcome")
        if outcome not in _OUTCOMES:
            raise ProtocolError(f"outcome: expected one of {', '.join(_OUTCOMES)}, got {outcome!r}")
        document = frame.get("document")
        if document is not None and not isinstance(document, dict):
            raise ProtocolError(f"document: expected a map, got {type(document).__name__}")
        message = frame.get("message")
        return cls(document, outcome, None if message is None else str(message))


@dataclass(frozen=True)
class RunningBuildInfo:
    """A worker build the daemon is running: `lowerd daemon status` lists them."""

    target: str
    config: str
    pid: int | None
    seconds: float

    def to_frame(self) -> Frame:
        return {
            "target": self.target,
            "config": self.config,
            "pid": self.pid,
            "seconds": self.seconds,
        }

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> RunningBuildInfo:
        return cls(
            str(frame["target"]), str(frame["config"]), frame.get("pid"), float(frame["seconds"])
        )


@dataclass(frozen=True)
class PeakInfo:
    """A target's peak RSS in its last build: what memory-aware admission reckons it needs."""

    config: str
    target: str
    bytes: int

    def to_frame(self) -> Frame:
        return {"config": self.config, "target": self.target, "bytes": self.bytes}

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> PeakInfo:
        return cls(str(frame["config"]), str(frame["target"]), int(frame["bytes"]))


@dataclass(frozen=True)
class StatusFrame:
    status: dict[str, Any]  # daemon/runtime.py's DaemonStatus, as its status file has it
    builds: tuple[RunningBuildInfo, ...] = ()
    peaks: tuple[PeakInfo, ...] = ()

    def to_frame(self) -> Frame:
        return {
            "type": "status",
            "status": self.status,
            "builds": [build.to_frame() for build in self.builds],
            "peaks": [peak.to_frame() for peak in self.peaks],
        }

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> StatusFrame:
        return cls(
            dict(frame.get("status") or {}),
            tuple(RunningBuildInfo.from_frame(b) for b in frame.get("builds") or []),
            tuple(PeakInfo.from_frame(p) for p in frame.get("peaks") or []),
        )


@dataclass(frozen=True)
class StoppingFrame:
    def to_frame(self) -> Frame:
        return {"type": "stopping"}

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> StoppingFrame:
        return cls()


@dataclass(frozen=True)
class ErrorFrame:
    """A request refused (malformed, another user's) or failed before it had an answer."""

    message: str

    def to_frame(self) -> Frame:
        return {"type": "error", "message": self.message}

    @classmethod
    def from_frame(cls, frame: Mapping[str, Any]) -> ErrorFrame:
        return cls(str(frame.get("message")))


Reply = ProgressFrame | FinalFrame | StatusFrame | StoppingFrame | ErrorFrame

_REPLIES: dict[str, Any] = {
    "progress": ProgressFrame,
    "final": FinalFrame,
    "status": StatusFrame,
    "stopping": StoppingFrame,
    "error": ErrorFrame,
}


def parse_reply(frame: Mapping[str, Any]) -> Reply:
    """The daemon's frame as its type; ProtocolError for one no daemon sends."""
    kind = _REPLIES.get(str(frame.get("type")))
    if kind is None:
        raise ProtocolError(f"type: unknown reply {frame.get('type')!r}")
    try:
        reply: Reply = kind.from_frame(frame)
    except (KeyError, TypeError, ValueError) as error:
        raise ProtocolError(f"malformed {frame.get('type')} frame: {error!r}") from error
    return reply


# What a build worker is asked ---------------------------------------------------------------


@dataclass(frozen=True)
class WorkerJob:
    """One target to build in a forked worker: the fork server's "build" message (with `id`),
    or the in-process `lowerd build`'s fork (without)."""

    config: str  # the project's pyproject.toml
    target: str
    id: int = 0
    memory_limit: int | None = None  # bytes of address space (RLIMIT_AS)
    use_cache: bool = True
    backends: tuple[str, ...] | None = None  # the editor's override of the config's backends
    warm_libraries: bool = False  # report the libraries it imported (for the fork server)
    # Where its outputs and build record go instead of the config's out_dir: a Ray task's own
    # folder, never the project's (cli/ray_task.py).
    out_dir: str | None = None

    def to_frame(self) -> Frame:
        return {
            "op": "build",
            "id": self.id,
            "config": self.config,
            "target": self.target,
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
        return {"type": "partitioned", "method": self.method, "report": self.report.to_json()}


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
        return {"type": "result", "result": self.result.to_json()}


WorkerEvent = ProgressEvent | PartitionedEvent | LibrariesEvent | PeakRssEvent | ResultEvent


def parse_event(frame: Mapping[str, Any]) -> WorkerEvent:
    """A worker's frame as its event; ProtocolError for one no worker sends."""
    kind = frame.get("type")
    try:
        if kind == "progress":
            detail = frame.get("detail")
            return ProgressEvent(str(frame["stage"]), None if detail is None else str(detail))
        if kind == "partitioned":
            return PartitionedEvent(str(frame["method"]), MethodReport.from_json(frame["report"]))
        if kind == "libraries":
            return LibrariesEvent(tuple(str(m) for m in frame.get("modules") or []))
        if kind == "peak_rss":
            return PeakRssEvent(int(frame["bytes"]))
        if kind == "result":
            return ResultEvent(TargetResult.from_json(frame["result"]))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ProtocolError(f"malformed {kind} event: {error!r}") from error
    raise ProtocolError(f"type: unknown worker event {kind!r}")


# The fork server's channel (worker/workers.py <-> worker/forkserver.py) -------------------------


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
