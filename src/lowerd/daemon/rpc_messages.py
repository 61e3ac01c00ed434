"""The daemon's private-socket requests and answers (daemon/rpc.py serves them,
cli/daemon_client.py sends them), typed: each is written and read by project/wire.py, the map on
the wire tagged with its `op` (a request) or `type` (a reply). One request per connection:

    build   BuildCall    -> ProgressFrame... -> FinalFrame (the document: `lowerd build --json`'s)
    compare CompareCall  -> ProgressFrame... -> FinalFrame (its document: CompareResult)
    status  StatusCall   -> StatusFrame
    stop    StopCall     -> StoppingFrame
    refused, malformed or unknown -> ErrorFrame

Nothing here imports asyncio or torch: the CLI client reads these frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lowerd.project.batch import Outcome
from lowerd.project.wire import WireError, decode_tagged, wire_field, wire_shape
from lowerd.worker.protocol import ProtocolError


def _non_empty(value: str) -> str | None:
    return None if value else "expected a non-empty string, got str ''"


def _names(values: tuple[str, ...]) -> str | None:
    empty = [index for index, value in enumerate(values) if not value]
    return f"item {empty[0]} is an empty string" if empty else None


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else f"expected an integer of at least 1, got int {value}"


# Requests (client -> daemon) ------------------------------------------------------------------


@wire_shape(tag="op")
@dataclass(frozen=True)
class BuildCall:
    """A client's `lowerd build`."""

    op: ClassVar[str] = "build"

    config: str = field(metadata=wire_field(check=_non_empty))  # the project's pyproject.toml
    targets: tuple[str, ...] = field(default=(), metadata=wire_field(check=_names))  # none: all
    use_cache: bool = True
    jobs: int = field(default=1, metadata=wire_field(check=_at_least_one))


@wire_shape(tag="op")
@dataclass(frozen=True)
class CompareCall:
    """A client's `lowerd compare`: the target built once per backend; answered like a build,
    the final frame's document being the compare's (project/compare_result.py)."""

    op: ClassVar[str] = "compare"

    config: str = field(metadata=wire_field(check=_non_empty))  # the project's pyproject.toml
    target: str = field(metadata=wire_field(check=_non_empty))
    # none: every known backend
    backends: tuple[str, ...] = field(default=(), metadata=wire_field(check=_names))
    use_cache: bool = True


@wire_shape(tag="op")
@dataclass(frozen=True)
class StatusCall:
    op: ClassVar[str] = "status"


@wire_shape(tag="op")
@dataclass(frozen=True)
class StopCall:
    op: ClassVar[str] = "stop"


Request = BuildCall | CompareCall | StatusCall | StopCall
REQUESTS: tuple[type[Request], ...] = (BuildCall, CompareCall, StatusCall, StopCall)


# Replies (daemon -> client) -------------------------------------------------------------------


@wire_shape(tag="type")
@dataclass(frozen=True)
class ProgressFrame:
    """A stage of one target's build, streamed while the request runs."""

    type: ClassVar[str] = "progress"

    target: str
    stage: str
    detail: str | None = None


@wire_shape(tag="type")
@dataclass(frozen=True)
class FinalFrame:
    """A build request's answer: the JSON document (lowerd build --json's) and how the build
    ended, or, when no document was made (a config error), the message to print."""

    type: ClassVar[str] = "final"

    document: dict[str, Any] | None
    outcome: Outcome
    message: str | None = None


@dataclass(frozen=True)
class RunningBuildInfo:
    """A worker build the daemon is running: `lowerd daemon status` lists them."""

    target: str
    config: str
    pid: int | None
    seconds: float


@dataclass(frozen=True)
class PeakInfo:
    """A target's peak RSS in its last build: what memory-aware admission reckons it needs."""

    config: str
    target: str
    bytes: int


@wire_shape(tag="type")
@dataclass(frozen=True)
class StatusFrame:
    type: ClassVar[str] = "status"

    status: dict[str, Any]  # daemon/runtime.py's DaemonStatus, as its status file has it
    builds: tuple[RunningBuildInfo, ...] = ()
    peaks: tuple[PeakInfo, ...] = ()


@wire_shape(tag="type")
@dataclass(frozen=True)
class StoppingFrame:
    type: ClassVar[str] = "stopping"


@wire_shape(tag="type")
@dataclass(frozen=True)
class ErrorFrame:
    """A request refused (malformed, another user's) or failed before it had an answer."""

    type: ClassVar[str] = "error"

    message: str


Reply = ProgressFrame | FinalFrame | StatusFrame | StoppingFrame | ErrorFrame
REPLIES: tuple[type[Reply], ...] = (
    ProgressFrame,
    FinalFrame,
    StatusFrame,
    StoppingFrame,
    ErrorFrame,
)


def parse_reply(frame: Mapping[str, Any]) -> Reply:
    """The daemon's frame as its type; ProtocolError naming the field of one no daemon sends."""
    try:
        reply: Reply = decode_tagged(REPLIES, frame, "reply")
    except WireError as error:
        raise ProtocolError(str(error)) from error
    return reply
