"""The delegation report's data: what each method runs on which backend. No torch here, so a
report can be stored, reloaded and shown by processes that never lower anything."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


def coverage_percent(delegated: int, ops: int) -> int:
    """The one rounding rule every view shows: down, so that "100 %" means every op is
    delegated (270 of 271 is 99 %)."""
    if ops <= 0:
        return 0
    return 100 if delegated >= ops else delegated * 100 // ops


@dataclass
class Frame:
    """A source location outside the user's files: a library's line and function."""

    file: str  # absolute (site-packages), or project-relative when inside the project
    line: int
    function: str | None = None


@dataclass
class NotDelegatedOp:
    op: str
    file: str | None  # the user's innermost frame (project-relative)
    line: int | None
    reason: str
    node: str
    # The innermost frame overall when it is not the user's: where a library made the op
    # (transformers' modeling_llama.py in LlamaRMSNorm.forward).
    library: Frame | None = None
    module_path: str | None = None  # nn_module_stack's innermost: model.layers.0.input_layernorm
    module_class: str | None = None  # LlamaRMSNorm
    elements: int = 0  # elements the op outputs (from meta["val"]): its work left on the CPU


@dataclass
class RefusalGroup:
    """Not-delegated ops with one cause at one place: same op, same reason, same library line,
    repeated over modules (every layer's RMSNorm). Ranked by what fixing them would buy."""

    op: str
    reason: str
    count: int
    file: str | None  # the user's line most of them come from
    line: int | None
    library: Frame | None
    nodes: list[str] = field(default_factory=list)
    module_paths: list[str] = field(default_factory=list)  # distinct, in graph order
    modules: str | None = None  # the paths collapsed: model.layers.{0..3}.input_layernorm
    module_class: str | None = None
    # Partitions that would merge if these ops were delegated: the boundaries they cause.
    boundaries: int = 0
    elements: int = 0  # summed output elements left on the CPU


@dataclass
class ModuleCoverage:
    """Coverage of one module path's subtree (ops of the module and of its children)."""

    path: str  # "" for the root; "model.layers.*.mlp" when aggregated over repeated layers
    module_class: str | None
    ops: int
    ops_delegated: int
    instances: int = 1  # module paths merged into this row: 4 for model.layers.* of 4 layers

    @property
    def coverage(self) -> float:
        return round(self.ops_delegated / self.ops, 4) if self.ops else 0.0


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
    # not_delegated grouped by cause and place, most costly first (lowering/refusals.py).
    refusals: list[RefusalGroup] = field(default_factory=list)
    # Coverage over the module tree, parents before children.
    modules: list[ModuleCoverage] = field(default_factory=list)
    # Partitions left after delegating the ops of the top 1, 2, … refusal groups (in their
    # order): what an editor's lens needs for "3 fixes would make this 1 partition". A fix
    # whose ops join no partition counts as a partition of its own.
    partitions_if_fixed: list[int] = field(default_factory=list)
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
                "not_delegated": [_not_delegated(op) for op in raw["not_delegated"]],
                "refusals": [_refusal(group) for group in raw.get("refusals", [])],
                "modules": [ModuleCoverage(**m) for m in raw.get("modules", [])],
            }
        )

    def with_lines_moved(self, moves: dict[tuple[str, int], tuple[str, int]]) -> MethodReport:
        """The user's lines moved to where the code is now; library lines stay where they are."""
        for op in [*self.not_delegated, *self.refusals]:
            if op.file is not None and op.line is not None:
                op.file, op.line = moves.get((op.file, op.line), (op.file, op.line))
        for partition in self.partitions:
            for source in partition.sources:
                source[0], source[1] = moves.get((source[0], source[1]), (source[0], source[1]))
        return self


def _frame(raw: dict[str, Any] | None) -> Frame | None:
    return Frame(**raw) if raw else None


def _not_delegated(raw: dict[str, Any]) -> NotDelegatedOp:
    return NotDelegatedOp(**{**raw, "library": _frame(raw.get("library"))})


def _refusal(raw: dict[str, Any]) -> RefusalGroup:
    return RefusalGroup(**{**raw, "library": _frame(raw.get("library"))})
