"""The daemon's private-socket requests and answers (daemon/rpc.py serves them,
cli/daemon_client.py sends them), typed: each has to_frame() (the msgpack map on the wire) and a
parser from it. One request per connection:

    build   {"op": "build", "config", "targets", "use_cache", "jobs"}
            -> {"type": "progress", "target", "stage", "detail"}...
            -> {"type": "final", "document", "outcome", "message"}
    compare {"op": "compare", "config", "target", "backends", "use_cache"}
            -> progress... -> final (the document: project/compare_result.py CompareResult)
    status  {"op": "status"} -> {"type": "status", "status", "builds", "peaks"}
    stop    {"op": "stop"}   -> {"type": "stopping"}
    refused, malformed or unknown -> {"type": "error", "message"}

Nothing here imports asyncio or torch: the CLI client reads these frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lowerd.project.batch import Outcome
from lowerd.worker.protocol import Frame, ProtocolError

_OUTCOMES: tuple[Outcome, ...] = ("ok", "target_failed", "usage")


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
