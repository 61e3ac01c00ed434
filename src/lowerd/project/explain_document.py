"""`lowerd explain --json`'s document and the language server's `lowerd.explain` answer, as
classes (project/explain.py makes them; project/wire.py writes them). Each fact of the build
record comes with its words; a target's `lines` are what the command prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.key_summary import KeySummary
from lowerd.project.rebuild_record import InputChange, SourceChange
from lowerd.project.wire import wire_field, wire_shape

_ONLY_GIVEN = wire_field(omit_none=True)

RecordStatus = Literal["no build record", "out of date", "up to date"]


@dataclass
class ExplainedInput(InputChange):
    words: str = ""


@dataclass
class ExplainedSource(SourceChange):
    words: str = ""


@dataclass(frozen=True)
class ExplainedPartition:
    """A partition the build did not lower: from the cache, kept with the .pte, or not served
    through lowerd's cache hook."""

    method: str
    index: int
    backend: str
    site: list[Any] | None  # [file, line]
    cache: str | None
    note: str | None
    label: str  # "XNNPACK #7 (forward, models/transformer.py:41)"
    words: str


@wire_shape(
    order=(
        *("method", "index", "backend", "site", "cache", "note", "previous", "matched_by"),
        *("changed", "changed_weights", "key", "earlier_key", "label", "words"),
    )
)
@dataclass(frozen=True)
class LoweredPartition(ExplainedPartition):
    """A partition lowered afresh, with the earlier build's taken for the same one (`previous`,
    how it was matched) and what changed in its cache key."""

    previous: int | None
    matched_by: str | None
    changed: list[str]
    changed_weights: list[str]
    key: KeySummary | None
    earlier_key: KeySummary | None


@dataclass(frozen=True)
class ProgramFacts:
    kept: bool  # the earlier build's .pte was kept
    why: str | None  # why it was lowered; None when kept


@dataclass(frozen=True)
class PartitionCounts:
    partitions: int
    lowered: int
    from_cache: int


@dataclass(frozen=True)
class ExplainedTarget:
    """A target's last build explained; the facts after `recorded` only when it is true."""

    name: str
    status: RecordStatus
    out_of_date: str | None  # why it is out of date (the first reason)
    recorded: bool  # the record says why the build did what it did
    # With no build record: why a file there was not taken as one (damaged, not a regular file).
    refused: str | None = field(default=None, metadata=_ONLY_GIVEN)
    output: str | None = field(default=None, metadata=_ONLY_GIVEN)
    earlier_build: bool | None = field(default=None, metadata=_ONLY_GIVEN)
    program: ProgramFacts | None = field(default=None, metadata=_ONLY_GIVEN)
    counts: PartitionCounts | None = field(default=None, metadata=_ONLY_GIVEN)
    inputs: list[ExplainedInput] | None = field(default=None, metadata=_ONLY_GIVEN)
    sources: list[ExplainedSource] | None = field(default=None, metadata=_ONLY_GIVEN)
    partitions: list[ExplainedPartition | LoweredPartition] | None = field(
        default=None, metadata=_ONLY_GIVEN
    )
    # Per method, which way its edge generation ran: only when the build lowered and says.
    edge_generation: dict[str, EdgeGeneration] | None = field(default=None, metadata=_ONLY_GIVEN)
    lines: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ExplainAnswer:
    """The targets explained; `error` alone when there is nothing to explain."""

    targets: list[ExplainedTarget] = field(default_factory=list)
    error: str | None = field(default=None, metadata=_ONLY_GIVEN)
