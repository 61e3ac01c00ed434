"""`lowerd compare`'s answer: one target lowered with each backend alone, summed up side by side.

The typed contract between the compare's builders (the daemon's CompareService, the in-process
CLI) and its views (the CLI table, `--json`, the editors' `lowerd.compare` command). Dicts only
through to_json()/from_json():

    {"config", "target", "warnings": [str],
     "backends": [{"backend": "xnnpack", "display": "XNNPACK", "status": "ok"|"error",
                   "coverage_percent", "ops", "ops_delegated", "partitions",
                   "not_delegated": [{"op", "count", "reason"}], "pte_bytes"|null,
                   "seconds", "cache": {"hits", "misses", "rebased"}, "reused", "output",
                   "error": {"kind", "message", "file", "line"}|null}]}

No torch here: the daemon reads and writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lowerd.project.backends import BACKENDS
from lowerd.project.result import CacheSummary, ErrorInfo, Status, TargetResult


@dataclass(frozen=True)
class NotDelegatedGroup:
    """One op left on the CPU, counted over every method, with the first reason given for it."""

    op: str
    count: int
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "count": self.count, "reason": self.reason}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> NotDelegatedGroup:
        return cls(str(raw["op"]), int(raw.get("count") or 0), str(raw.get("reason") or ""))


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
    seconds: float = 0.0
    cache: CacheSummary = field(default_factory=CacheSummary)
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
            cache=result.cache,
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

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "display": self.display,
            "status": self.status,
            "coverage_percent": self.coverage_percent,
            "ops": self.ops,
            "ops_delegated": self.ops_delegated,
            "partitions": self.partitions,
            "not_delegated": [group.to_json() for group in self.not_delegated],
            "pte_bytes": self.pte_bytes,
            "seconds": round(self.seconds, 3),
            "cache": {
                "hits": self.cache.hits,
                "misses": self.cache.misses,
                "rebased": self.cache.rebased,
            },
            "reused": self.reused,
            "output": self.output,
            "error": self.error.to_json() if self.error else None,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> BackendComparison:
        backend = str(raw["backend"])
        error = raw.get("error")
        return cls(
            backend=backend,
            display=str(raw.get("display") or display_name(backend)),
            status="ok" if raw.get("status") == "ok" else "error",
            coverage_percent=int(raw.get("coverage_percent") or 0),
            ops=int(raw.get("ops") or 0),
            ops_delegated=int(raw.get("ops_delegated") or 0),
            partitions=int(raw.get("partitions") or 0),
            not_delegated=tuple(
                NotDelegatedGroup.from_json(g) for g in raw.get("not_delegated") or []
            ),
            pte_bytes=raw.get("pte_bytes"),
            seconds=float(raw.get("seconds") or 0.0),
            cache=CacheSummary.from_json(raw.get("cache")),
            reused=raw.get("reused"),
            output=raw.get("output"),
            error=ErrorInfo.from_json(error) if error else None,
        )


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

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "target": self.target,
            "backends": [column.to_json() for column in self.backends],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> CompareResult:
        return cls(
            config=str(raw.get("config") or ""),
            target=str(raw.get("target") or ""),
            backends=tuple(BackendComparison.from_json(b) for b in raw.get("backends") or []),
            warnings=tuple(str(w) for w in raw.get("warnings") or []),
        )


def display_name(backend: str) -> str:
    known = BACKENDS.get(backend)
    return known.display if known is not None else backend
