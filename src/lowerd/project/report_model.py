"""The delegation report's data: what each method runs on which backend. No torch here, so a
report can be stored, reloaded and shown by processes that never lower anything."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.method_graph import MethodGraph
from lowerd.project.record_check import partition_sources_problem
from lowerd.project.wire import wire_field, wire_shape

# When leaving the fewest partitions takes more fixes than this, the hint also says what the
# first ones do.
EARLY_FIXES = 5


def coverage_percent(delegated: int, ops: int) -> int:
    """The one rounding rule every view shows: down, so that "100 %" means every op is
    delegated (270 of 271 is 99 %)."""
    if ops <= 0:
        return 0
    return 100 if delegated >= ops else delegated * 100 // ops


@dataclass(frozen=True)
class Coverage:
    """What every view shows of a method's coverage, computed once (coverage_of)."""

    percent: int
    # "231 of 271 ops on XNNPACK in 42 partitions (85 %)", without the method's name
    summary: str
    # "3 fixes would make this 1 partition"; None when no fix would merge partitions
    fixes_hint: str | None


def coverage_of(
    ops: int,
    delegated: int,
    backends: Mapping[str, Mapping[str, int]],
    partitions_if_fixed: Sequence[int] | None = None,
    boundaries: Sequence[int] = (),
) -> Coverage:
    """The one place the coverage sentence, its percent and the fixes hint are made: the CLI's
    report, the editor's lens and hover, VS Code and Neovim show what this says.

    `backends`: display name -> {"ops", "partitions"}; `partitions_if_fixed`: partitions left
    after delegating the top 1, 2, … refusal groups (the lowering's own count), else estimated
    from `boundaries`, each group's partition boundaries in the groups' order.
    """
    percent = coverage_percent(delegated, ops)
    taking = [
        (name, totals.get("ops", 0), totals.get("partitions", 0))
        for name, totals in backends.items()
        if totals.get("ops")
    ]
    if len(taking) == 1:
        name, _, partitions = taking[0]
        summary = f"{delegated} of {ops} ops on {name} in {_plural(partitions, 'partition')}"
        summary += f" ({percent} %)"
    elif not taking:
        summary = f"0 of {ops} ops delegated (0 %)"
    else:
        each = ", ".join(f"{n} on {name} in {_plural(p, 'partition')}" for name, n, p in taking)
        summary = f"{delegated} of {ops} ops delegated ({each}; {percent} %)"
    current = sum(totals.get("partitions") or 0 for totals in backends.values())
    after = _partitions_after_fixes(partitions_if_fixed, boundaries, current)
    return Coverage(percent, summary, _fixes_hint(current, after))


def _partitions_after_fixes(
    counted: Sequence[int] | None, boundaries: Sequence[int], current: int
) -> list[int]:
    """Partitions left after fixing the top 1, 2, … refusal groups: the lowering's count, else
    each group's boundaries taken off in turn."""
    if counted:
        return list(counted)
    after, left = [], current
    for merged in boundaries:
        left = max(1, left - merged)
        after.append(left)
    return after


def _fixes_hint(current: int, after: list[int]) -> str | None:
    """ "3 fixes would make this 1 partition": how many of the top refusal groups must be
    delegated to leave the fewest partitions; when that takes more than EARLY_FIXES, also the
    best the first EARLY_FIXES do ("4 fixes would make this 6 partitions, 34 would make 1")."""
    if current <= 1 or not after or min(after) >= current:
        return None
    fewest = min(after)
    fixes = after.index(fewest) + 1
    hint = f"{_fixes(fixes)} would make this {_plural(fewest, 'partition')}"
    early = min(after[:EARLY_FIXES])
    if fixes > EARLY_FIXES and early < current:
        first = after.index(early) + 1
        hint = f"{_fixes(first)} would make this {_plural(early, 'partition')}, {fixes} would "
        hint += f"make {fewest}"
    return hint


def _fixes(count: int) -> str:
    return f"{count} fix" if count == 1 else f"{count} fixes"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


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


@wire_shape(computed=("percent",))
@dataclass
class ModuleCoverage:
    """Coverage of one module path's subtree (ops of the module and of its children); the wire
    carries its `percent` too, computed, never read."""

    path: str  # "" for the root; "model.layers.*.mlp" when aggregated over repeated layers
    module_class: str | None
    ops: int
    ops_delegated: int
    instances: int = 1  # module paths merged into this row: 4 for model.layers.* of 4 layers

    @property
    def coverage(self) -> float:
        return round(self.ops_delegated / self.ops, 4) if self.ops else 0.0

    @property
    def percent(self) -> int:
        """The row's percent by the one rounding rule (coverage_percent): what every view shows."""
        return coverage_percent(self.ops_delegated, self.ops)


@dataclass
class PartitionSummary:
    backend: str
    ops: int
    # "hit", "rebased", "miss", "uncached"; None when not preprocessed (yet) under lowerd's hook
    cache: str | None
    # [file, line, op] of each delegated op that has a user source line: what a hover shows
    sources: list[list[Any]] = field(
        default_factory=list, metadata=wire_field(check=partition_sources_problem)
    )
    # The backend's processed blob (LoweredBackendModule.processed_bytes), which the .pte holds
    # as the delegate's data; None before preprocess and in records of an older lowerd.
    blob_bytes: int | None = None
    # The named data the backend stored beside the blob (XNNPACK's weights), by the same rule.
    data_bytes: int | None = None


# The coverage facts are written after the fields, computed from them (coverage_of), never read.
@wire_shape(computed=("coverage_percent", "summary", "fixes_hint"))
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
    # True for the last build's report shown while the edited program is lowered (seconds of
    # edge generation on a real model), the edited modules' refusals (lowered alone) in place of
    # its own there, its lines moved to where the code is now once exported: the partitioned
    # report replaces it.
    provisional: bool = False
    # From the emitted program (lowering/program_sizes.py): the bytes of the method's planned
    # memory (ExecutionPlan.non_const_buffer_sizes, summed: the activations arena a runtime
    # allocates) and of the constant tensors its plan uses from the .pte's constant data (shared
    # weights count in each method that uses them). None until emitted, and in older records.
    planned_memory_bytes: int | None = None
    constant_bytes: int | None = None
    # Every op and the data flow between them, coloured by partition (project/method_graph.py):
    # what `lowerd report --html` draws. None in the partitioned report and older records.
    graph: MethodGraph | None = None
    # Which way edge generation ran (project/edge_generation.py): by region, or stock's and the
    # gate that refused. None in a partitioned or kept report (no edge generation of its own)
    # and in older records (and then not written).
    edge_generation: EdgeGeneration | None = field(
        default=None, metadata=wire_field(omit_none=True)
    )

    def coverage_facts(self) -> Coverage:
        return coverage_of(
            self.ops,
            self.ops_delegated,
            self.backends,
            self.partitions_if_fixed,
            [group.boundaries for group in self.refusals],
        )

    @property
    def coverage_percent(self) -> int:
        return self.coverage_facts().percent

    @property
    def summary(self) -> str:
        """ "231 of 271 ops on XNNPACK in 42 partitions (85 %)"."""
        return self.coverage_facts().summary

    @property
    def fixes_hint(self) -> str | None:
        """ "3 fixes would make this 1 partition", or None."""
        return self.coverage_facts().fixes_hint

    def kept(self) -> MethodReport:
        """This report for a build that kept its .pte: no edge generation ran in it."""
        return replace(self, edge_generation=None)

    def with_lines_moved(self, moves: dict[tuple[str, int], tuple[str, int]]) -> MethodReport:
        """The user's lines moved to where the code is now; library lines stay where they are."""
        placed: list[NotDelegatedOp | RefusalGroup] = [*self.not_delegated, *self.refusals]
        for op in placed:
            if op.file is not None and op.line is not None:
                op.file, op.line = moves.get((op.file, op.line), (op.file, op.line))
        for partition in self.partitions:
            for source in partition.sources:
                source[0], source[1] = moves.get((source[0], source[1]), (source[0], source[1]))
        return self
