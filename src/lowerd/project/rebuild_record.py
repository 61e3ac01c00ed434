"""Why a build did what it did, as its build record keeps it for `lowerd explain`.

Made at the end of each build by comparing what it read and made with the previous record:
which source files changed (and at which lines), which of the target's inputs (config, tool
versions) changed, whether the program was the last build's (its .pte kept), and for each
partition how the cache served it and, when it was lowered afresh, which of its key's inputs
changed since the earlier build's partition taken for the same (project/partition_match.py).
Only facts are stored, in the record's msgpack; the words are made when they are read
(project/explain.py), so a wording fix needs no rebuild. No torch here.
"""

from __future__ import annotations

import difflib
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lowerd.project.key_summary import KeySummary
from lowerd.project.partition_match import PartitionIdentity, match_partitions
from lowerd.project.record_check import site_problem
from lowerd.project.report_model import MethodReport, PartitionSummary
from lowerd.project.wire import wire_field

if TYPE_CHECKING:  # build_state imports this module for its TargetState's field
    from lowerd.project.build_state import TargetState

# Outcomes of a partition that was preprocessed in the build (the others came from the cache,
# or with the .pte kept, from the earlier build).
LOWERED = ("miss", "uncached")
# Why a build lowered afresh when the target's inputs digest moved (lowering/build.py); the
# changed inputs' own lines then say which.
INPUTS_CHANGED = "the target's inputs changed"
# A source larger than this, or not UTF-8 text (a weights file), is said to have changed
# without its lines: its line checksums would cost more than they tell.
MAX_LINES_BYTES = 2_000_000


@dataclass
class SourceChange:
    path: str  # relative to the project root, as reports name files
    change: str  # "changed", "added" (read now, not by the earlier build) or "removed"
    old_sha256: str | None
    new_sha256: str | None
    # [first, last] 1-based line ranges of the new text that differ from the old (a deletion
    # marks the line now in its place); empty when the lines are unknown.
    lines: list[list[int]] = field(default_factory=list)


@dataclass
class InputChange:
    """One part of the target's inputs (build_state.target_inputs) that changed; `part` is
    "unrecorded" when the earlier record kept only their digest (an older lowerd)."""

    part: str
    old: str | None
    new: str | None


@dataclass
class PartitionFacts:
    method: str
    index: int  # 1-based, the partition's place in its method's report
    backend: str  # as the report names it: "XNNPACK"
    # "hit", "rebased", "miss", "uncached"; "kept" when the .pte was kept; None when not known
    cache: str | None
    # [file, line] of its first op at a line of the user's
    site: list[Any] | None = field(metadata=wire_field(check=site_problem))
    key: KeySummary | None  # None when not keyed (the cache was off, or a value is unkeyable)
    note: str | None = None  # why the cache did not serve or keep it (the preprocess note)
    # For a partition lowered afresh: the earlier build's partition taken for the same one,
    # how it was matched, its key, and the names of the key's inputs that differ.
    previous: int | None = None  # its index in the earlier build's method
    # partition_match's rule; "unrecorded" when the earlier record kept no partitions
    matched_by: str | None = None
    earlier_key: KeySummary | None = None
    changed: list[str] = field(default_factory=list)
    changed_weights: list[str] = field(default_factory=list)

    @property
    def identity(self) -> PartitionIdentity:
        return PartitionIdentity(self.method, self.backend, self.key)


@dataclass
class RebuildRecord:
    earlier_build: bool  # False: no record to compare with (a first build, or after a failure)
    kept: bool  # the program matched the earlier build's: its .pte was kept, nothing lowered
    why: str | None  # why it was lowered ("the exported program changed (forward)"); None: kept
    sources: list[SourceChange] = field(default_factory=list)
    inputs: list[InputChange] = field(default_factory=list)
    partitions: list[PartitionFacts] = field(default_factory=list)


def kept_partitions(
    reports: dict[str, MethodReport], earlier: list[PartitionFacts]
) -> list[PartitionFacts]:
    """The partitions of a kept .pte: the earlier build's keys (the blobs are its), at the lines
    where the code is now."""
    keys = {(p.method, p.index): p.key for p in earlier}
    return [
        partition_facts(method, index, partition, "kept", keys.get((method, index)), None)
        for method, report in reports.items()
        for index, partition in enumerate(report.partitions, start=1)
    ]


def partition_facts(
    method: str,
    index: int,
    partition: PartitionSummary,
    cache: str | None,
    key: KeySummary | None,
    note: str | None,
) -> PartitionFacts:
    """A partition of the report as the record keeps it: its first op's user line as its site."""
    site = partition.sources[0][:2] if partition.sources else None
    return PartitionFacts(method, index, partition.backend, cache, site, key, note)


def record_rebuild(
    root: Path,
    earlier: TargetState | None,
    now: TargetState,
    why: str | None,
    partitions: list[PartitionFacts],
) -> RebuildRecord:
    """The record of the build that made `now`, compared with `earlier`'s (None: no record)."""
    if earlier is None:
        return RebuildRecord(False, why is None, why, partitions=partitions)
    if earlier.rebuild is not None:
        partitions = compared(partitions, earlier.rebuild.partitions)
    else:  # an older lowerd's record: it kept no partitions to compare with
        for partition in partitions:
            partition.matched_by = "unrecorded" if partition.cache in LOWERED else None
    return RebuildRecord(
        earlier_build=True,
        kept=why is None,
        why=why,
        sources=source_changes(root, earlier, now),
        inputs=input_changes(earlier, now),
        partitions=partitions,
    )


def source_changes(root: Path, earlier: TargetState, now: TargetState) -> list[SourceChange]:
    before = {s.path: s.sha256 for s in earlier.sources}
    after = {s.path: s.sha256 for s in now.sources}
    changes = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        change = "added" if old is None else "removed" if new is None else "changed"
        lines = changed_lines(earlier.source_lines.get(path), now.source_lines.get(path))
        changes.append(SourceChange(_display(root, path), change, old, new, lines))
    return changes


def input_changes(earlier: TargetState, now: TargetState) -> list[InputChange]:
    if earlier.inputs_digest == now.inputs_digest:
        return []
    if not earlier.inputs:  # kept by a lowerd that recorded only the digest
        return [InputChange("unrecorded", None, None)]
    parts = dict.fromkeys([*now.inputs, *earlier.inputs])
    return [
        InputChange(part, earlier.inputs.get(part), now.inputs.get(part))
        for part in parts
        if earlier.inputs.get(part) != now.inputs.get(part)
    ]


def compared(now: list[PartitionFacts], earlier: list[PartitionFacts]) -> list[PartitionFacts]:
    """`now`, each partition lowered afresh with the earlier build's partition taken for the
    same one and what changed in its key."""
    matches = match_partitions([p.identity for p in now], [p.identity for p in earlier])
    for position, partition in enumerate(now):
        match = matches.get(position)
        if partition.cache not in LOWERED or match is None:
            continue
        before = earlier[match.earlier]
        partition.previous, partition.matched_by = before.index, match.how
        partition.earlier_key = before.key
        if partition.key is not None and before.key is not None:
            partition.changed = partition.key.diff(before.key)
            if "tensors" in partition.changed:
                partition.changed_weights = partition.key.changed_weights(before.key)
    return now


def line_checksums(paths: Iterable[str]) -> dict[str, list[int]]:
    """A CRC-32 per line of each text file: what the next build diffs to say which lines
    changed, at 5 bytes a line instead of the text."""
    checksums = {}
    for path in paths:
        try:
            data = Path(path).read_bytes()
            if len(data) > MAX_LINES_BYTES:
                continue
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        checksums[path] = [zlib.crc32(line.encode()) for line in text.splitlines()]
    return checksums


def changed_lines(old: list[int] | None, new: list[int] | None) -> list[list[int]]:
    """1-based [first, last] ranges of `new` that differ from `old`; [] when either is unknown."""
    if old is None or new is None:
        return []
    ranges: list[list[int]] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, _, _, first, end in matcher.get_opcodes():
        if tag == "equal":
            continue
        if first == end:  # lines deleted: the line now in their place (the last, at the end)
            first = min(first, len(new) - 1) if new else 0
            end = first + 1
        if ranges and first <= ranges[-1][1]:  # touching the previous range: one range
            ranges[-1][1] = max(ranges[-1][1], end)
        else:
            ranges.append([first + 1, end])
    return ranges


def _display(root: Path, path: str) -> str:
    try:
        return Path(path).relative_to(root.resolve()).as_posix()
    except ValueError:
        return path
