"""The delegation report's data: what each method runs on which backend. No torch here, so a
report can be stored, reloaded and shown by processes that never lower anything."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class NotDelegatedOp:
    op: str
    file: str | None
    line: int | None
    reason: str
    node: str


@dataclass
class PartitionSummary:
    backend: str
    ops: int
    cache: str | None  # "hit", "miss", "uncached"; None when preprocess ran outside lowerd's hook


@dataclass
class MethodReport:
    delegated_nodes: int
    non_delegated_nodes: int
    subgraphs: int
    ops: int
    ops_delegated: int
    coverage: float
    backends: dict[str, dict[str, int]] = field(default_factory=dict)
    partitions: list[PartitionSummary] = field(default_factory=list)
    not_delegated: list[NotDelegatedOp] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> MethodReport:
        return cls(
            **{
                **raw,
                "partitions": [PartitionSummary(**p) for p in raw["partitions"]],
                "not_delegated": [NotDelegatedOp(**op) for op in raw["not_delegated"]],
            }
        )

    def with_lines_moved(self, moves: dict[tuple[str, int], tuple[str, int]]) -> MethodReport:
        for op in self.not_delegated:
            if op.file is not None and op.line is not None:
                op.file, op.line = moves.get((op.file, op.line), (op.file, op.line))
        return self
