"""The messages between a build worker, its fork server and the supervisor that runs them,
typed: each is written and read by project/wire.py, the msgpack map on the wire tagged with its
`type` (an event) or `op` (the fork server's channel); dicts exist only as frames. The daemon's
private-socket requests and answers are daemon/rpc_messages.py's.

A build worker's event pipe (worker/forkserver.py writes; the supervisor, worker/workers.py,
reads), in this order: ProgressEvent... PartitionedEvent... [BuiltEvent, ProgressEvent("verify")]
LibrariesEvent, PeakRssEvent, then ResultEvent. A verifying target's BuiltEvent is its result
once the .pte is written, before the verification; its ResultEvent is the same with it.

The fork server's channel (worker/fork_server_client.py <-> worker/forkserver.py, one message
a packet): to it WorkerJob (with the event pipe's fd) or PreloadRequest; from it ReadyMessage,
StartedMessage, ExitedMessage, PreloadedMessage.

What a worker is asked to build, whoever supervises it (the daemon's pool through the fork
server, or the in-process CLI's and the Ray task's through forks of their own): WorkerJob.

Nothing here imports asyncio or torch: the CLI client reads these frames.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, TypeVar

from lowerd.project.report_model import MethodReport
from lowerd.project.result import TargetResult
from lowerd.project.wire import WireError, decode_tagged, wire_field, wire_shape

Frame = dict[str, Any]
T = TypeVar("T")


class ProtocolError(Exception):
    """A frame that is not the message it should be; the message names the field."""


# What a build worker is asked ---------------------------------------------------------------


@wire_shape(
    tag="op",
    order=(
        *("id", "config", "target", "timeout", "memory_limit", "use_cache", "backends"),
        "warm_libraries",
    ),
)
@dataclass(frozen=True)
class WorkerJob:
    """One target to build in a forked worker, and the limits its supervisor holds it to
    (worker/workers.py WorkerPool): what the daemon, the in-process CLI and the Ray task submit,
    and, with the pool's `id`, the fork server's "build" message."""

    op: ClassVar[str] = "build"

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
    # `lowerd verify`: True, the target verifies after its build whatever its config says;
    # `bench` True: its latency measured again, not taken from the same program's verification.
    # None (left out of the frame): as the config says.
    verify: bool | None = field(default=None, metadata=wire_field(omit_none=True))
    bench: bool | None = field(default=None, metadata=wire_field(omit_none=True))
    id: int = 0  # the pool's number for the build, on the fork server's channel

    def __post_init__(self) -> None:
        # No backends and no folder are none at all: one job, however it was asked for.
        if not self.backends:
            object.__setattr__(self, "backends", None)
        if not self.out_dir:
            object.__setattr__(self, "out_dir", None)


# Worker events (worker -> daemon or in-process CLI, on the event pipe) -------------------------


@wire_shape(tag="type")
@dataclass(frozen=True)
class ProgressEvent:
    type: ClassVar[str] = "progress"

    stage: str  # load, quantize, export, partition, preprocess, emit, write
    detail: str | None = None  # the method during export, "3/42" during preprocess


@wire_shape(tag="type")
@dataclass(frozen=True)
class PartitionedEvent:
    """A method's report as soon as it is partitioned (`final` false until the result), or,
    `provisional`, the last build's with the edited modules' refusals lowered alone in place of
    its own there (after load: lowering/edited_region.py; again after export, its lines moved).
    Each replaces the one before; the result replaces them all."""

    type: ClassVar[str] = "partitioned"

    method: str
    report: MethodReport


@wire_shape(tag="type")
@dataclass(frozen=True)
class LibrariesEvent:
    """Installed libraries the build imported: the fork server imports them for the next."""

    type: ClassVar[str] = "libraries"

    modules: tuple[str, ...]


@wire_shape(tag="type")
@dataclass(frozen=True)
class PeakRssEvent:
    type: ClassVar[str] = "peak_rss"

    bytes: int


@wire_shape(tag="type")
@dataclass(frozen=True)
class BuiltEvent:
    """A verifying target's result once its .pte is written, before the program runs on the
    host runtime: an editor shows its diagnostics now, the verification when ResultEvent comes."""

    type: ClassVar[str] = "built"

    result: TargetResult


@wire_shape(tag="type")
@dataclass(frozen=True)
class ResultEvent:
    """The last event: the target's result."""

    type: ClassVar[str] = "result"

    result: TargetResult


WorkerEvent = (
    ProgressEvent | PartitionedEvent | BuiltEvent | LibrariesEvent | PeakRssEvent | ResultEvent
)
EVENTS: tuple[type[WorkerEvent], ...] = (
    ProgressEvent,
    PartitionedEvent,
    BuiltEvent,
    LibrariesEvent,
    PeakRssEvent,
    ResultEvent,
)


def parse_event(frame: Mapping[str, Any]) -> WorkerEvent:
    """A worker's frame as its event; ProtocolError naming the field of one no worker sends."""
    return _parsed(EVENTS, frame, "worker event")


# The fork server's channel (worker/fork_server_client.py <-> worker/forkserver.py) -------------


@wire_shape(tag="op")
@dataclass(frozen=True)
class PreloadRequest:
    """Import these installed libraries between builds, so that the next forks start with them
    (worker/libraries.py)."""

    op: ClassVar[str] = "preload"

    modules: tuple[str, ...]


ForkServerRequest = WorkerJob | PreloadRequest


def parse_fork_server_request(raw: object) -> ForkServerRequest:
    """A message to the fork server as its type; ProtocolError for one no daemon sends."""
    classes: tuple[type[ForkServerRequest], ...] = (WorkerJob, PreloadRequest)
    return _parsed(classes, raw, "fork server request")


@wire_shape(tag="op")
@dataclass(frozen=True)
class ReadyMessage:
    """Warm (torch, ExecuTorch imported, one model lowered): from now on it reads its channel."""

    op: ClassVar[str] = "ready"

    @property
    def id(self) -> int:
        return 0


@wire_shape(tag="op")
@dataclass(frozen=True)
class StartedMessage:
    """The worker of build `id` was forked: its pid, which the daemon kills to end the build."""

    op: ClassVar[str] = "started"

    id: int
    pid: int


@wire_shape(tag="op")
@dataclass(frozen=True)
class ExitedMessage:
    """The worker of build `id` ended: its wait() status and the CPU seconds it used, as its
    reaper's wait4() said (workers.exit_message reads them); how a local fork ended, too."""

    op: ClassVar[str] = "exited"

    id: int
    status: int
    cpu_seconds: float | None = field(default=None, metadata=wire_field(omit_none=True))

    @classmethod
    def reaped(cls, build_id: int, status: int, usage: resource.struct_rusage) -> ExitedMessage:
        """From wait4(): the CPU time is user and system time, as RLIMIT_CPU counts it."""
        return cls(build_id, status, float(usage.ru_utime + usage.ru_stime))


@wire_shape(tag="op")
@dataclass(frozen=True)
class PreloadedMessage:
    """A preload's answer: how many of the libraries it imported, those it left cold (their
    import would start a thread a fork copies), and whether it has such a thread anyway."""

    op: ClassVar[str] = "preloaded"

    imported: int
    cold: tuple[str, ...] = ()
    tainted: bool = False

    @property
    def id(self) -> int:
        return 0


ForkServerMessage = ReadyMessage | StartedMessage | ExitedMessage | PreloadedMessage
FORK_SERVER_MESSAGES: tuple[type[ForkServerMessage], ...] = (
    ReadyMessage,
    StartedMessage,
    ExitedMessage,
    PreloadedMessage,
)


def parse_fork_server_message(raw: object) -> ForkServerMessage:
    """A message from the fork server as its type; ProtocolError for one it never sends."""
    return _parsed(FORK_SERVER_MESSAGES, raw, "fork server message")


def _parsed(classes: Sequence[type[T]], raw: object, what: str) -> T:
    try:
        return decode_tagged(classes, raw, what)
    except WireError as error:
        raise ProtocolError(str(error)) from error
