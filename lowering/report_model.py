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
    # "hit", "rebased", "miss", "uncached"; None when not preprocessed (yet) under lowerd's hook
    cache: str | None
    # [file, line, op] of each delegated op that has a user source line: what a hover shows
    sources: list[list[Any]] = field(default_factory=list)


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
    # False for the report made as soon as partitioning is done, before preprocess: its
    # get_delegation_info counts (delegated_nodes, ...) are 0 and its partitions have no cache.
    final: bool = True
    # True for the last build's report, its lines moved to where the code is now, shown while the
    # edited program is lowered (seconds of edge generation on a real model): the partitioned
    # report replaces it.
    provisional: bool = False

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
        for partition in self.partitions:
            for source in partition.sources:
                source[0], source[1] = moves.get((source[0], source[1]), (source[0], source[1]))
        return self
