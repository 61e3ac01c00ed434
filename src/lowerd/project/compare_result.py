"""`lowerd compare`'s answer: one target lowered with each backend alone, summed up side by side.

The typed contract between the compare's builders (the daemon's CompareService, the in-process
CLI) and its views (the CLI table, `--json`, the editors' `lowerd.compare` command). Dicts only
through project/wire.py's encode and decode; the fields are the wire's keys. No torch here: the
daemon reads and writes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lowerd.project.backends import BACKENDS
from lowerd.project.result import CacheCounts, ErrorInfo, Status, TargetResult
from lowerd.project.wire import wire_field


@dataclass(frozen=True)
class NotDelegatedGroup:
    """One op left on the CPU, counted over every method, with the first reason given for it."""

    op: str
    count: int
    reason: str = ""


@dataclass(frozen=True)
class BackendComparison:
    """The target lowered with one backend alone: its column of the table."""

    backend: str  # as the config names it: "xnnpack"
    display: str  # as the report names it: "XNNPACK"
    status: Status
    coverage_percent: int = 0
    ops: int = 0
    ops_delegated: int = 0
    partitions: int = 0
    not_delegated: tuple[NotDelegatedGroup, ...] = ()  # most ops first
    pte_bytes: int | None = None
    seconds: float = field(default=0.0, metadata=wire_field(digits=3))
    cache: CacheCounts = field(default_factory=CacheCounts)
    reused: str | None = None  # "up-to-date": answered from the compare's own build record
    output: str | None = None  # the compare's private .pte, never the target's
    error: ErrorInfo | None = None

    @classmethod
    def of(cls, backend: str, result: TargetResult) -> BackendComparison:
        """Summed over the target's methods, as the report's coverage is (TargetCoverage)."""
        methods = result.methods.values()
        counts: dict[str, int] = {}
        reasons: dict[str, str] = {}
        for report in methods:
            for op in report.not_delegated:
                counts[op.op] = counts.get(op.op, 0) + 1
                reasons.setdefault(op.op, op.reason)
        most_first = sorted(counts, key=lambda op: -counts[op])  # stable: ties in graph order
        return cls(
            backend=backend,
            display=display_name(backend),
            status=result.status,
            coverage_percent=result.coverage.percent,
            ops=sum(report.ops for report in methods),
            ops_delegated=sum(report.ops_delegated for report in methods),
            # As the report's sentence counts them ("in 2 partitions"): coverage_of's `current`.
            partitions=sum(
                totals.get("partitions") or 0
                for report in methods
                for totals in report.backends.values()
            ),
            not_delegated=tuple(
                NotDelegatedGroup(op, counts[op], reasons[op]) for op in most_first
            ),
            pte_bytes=result.sizes.pte_bytes if result.sizes is not None else None,
            seconds=result.seconds,
            cache=CacheCounts(result.cache.hits, result.cache.misses, result.cache.rebased),
            reused=result.reused,
            output=result.output,
            error=result.error,
        )

    @classmethod
    def failed(cls, backend: str, error: ErrorInfo) -> BackendComparison:
        return cls(backend, display_name(backend), "error", error=error)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class CompareResult:
    config: str  # the project's pyproject.toml
    target: str
    backends: tuple[BackendComparison, ...]  # in the order asked for
    warnings: tuple[str, ...] = ()  # the blob cache's, as a build's document has them

    @property
    def compared(self) -> bool:
        """At least one backend lowered: a backend that cannot (coremltools missing) is its
        column's error, not the compare's failure."""
        return any(column.ok for column in self.backends)


def display_name(backend: str) -> str:
    known = BACKENDS.get(backend)
    return known.display if known is not None else backend
