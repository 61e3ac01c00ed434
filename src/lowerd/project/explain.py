"""`lowerd explain`: why the last build of each target did what it did, in words.

Read from the build records (project/rebuild_record.py), never from a build: torch-free, so the
command line answers at once and the language server's `lowerd.explain` command (the editor's
*Explain this rebuild*) answers from its own process. Both give the document made here
(project/explain_document.py); its `lines` are what the command prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from lowerd.project.build_state import TargetState, read_state, why_out_of_date
from lowerd.project.config import ProjectConfig, TargetConfig, select_targets
from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.errors import ConfigError
from lowerd.project.explain_document import (
    ExplainAnswer,
    ExplainedInput,
    ExplainedPartition,
    ExplainedSource,
    ExplainedTarget,
    LoweredPartition,
    PartitionCounts,
    ProgramFacts,
    RecordStatus,
)
from lowerd.project.rebuild_record import (
    INPUTS_CHANGED,
    LOWERED,
    InputChange,
    PartitionFacts,
    RebuildRecord,
    SourceChange,
)

# The language server's command: arguments are target names (none: every target).
EXPLAIN = "lowerd.explain"

# Each input of a partition's key (PartitionKeyDetails' fields) as a user reads it when it changed.
KEY_WORDS = {
    "format_version": "lowerd's cache key format changed",
    "backend": "the backend changed",
    "naming": "the key's node naming changed",
    "torch_version": "the torch version changed",
    "executorch_version": "the ExecuTorch version changed",
    "compile_specs": "the compile specs changed",
    "graph": "the graph changed",
    "submodules": "its control-flow branches or attribute constants changed",
    "signature": "its inputs or outputs changed",
    "range_constraints": "the dynamic-shape ranges changed",
    "tensors": "the weights changed",
}

# Each part of the target's inputs (build_state.target_inputs) as a user reads it.
INPUT_WORDS = {
    "state_version": "lowerd's build record version",
    "entry": "entry",
    "backends": "backends",
    "backend_options": "backend options",
    "etrecord": "etrecord",
    "lowering_options": "lowering options",
    "quantize": "quantize",
    "root": "project folder",
}
TOOLS = ("torch", "executorch", "lowerd")
# Named in a line before "and N more".
SHOWN_WEIGHTS = 3
SHOWN_RANGES = 4
SHOWN_VALUE_CHARS = 80


def explain_answer(config: ProjectConfig | None, names: Sequence[str]) -> ExplainAnswer:
    """The language server's answer: the document, or `error` when there is nothing to explain."""
    if config is None:
        return ExplainAnswer(error="no lowerd project is loaded")
    try:
        return explain_targets(config, names)
    except ConfigError as error:
        return ExplainAnswer(error=str(error))


def explain_targets(config: ProjectConfig, names: Sequence[str]) -> ExplainAnswer:
    """The named targets (all, without names) explained; an unknown name is a ConfigError."""
    return ExplainAnswer([explain_target(config, t) for t in select_targets(config, names)])


def explain_target(config: ProjectConfig, target: TargetConfig) -> ExplainedTarget:
    read = read_state(config, target)
    state = read.state
    stale = why_out_of_date(config, target, state)
    rebuild = state.rebuild if state is not None else None
    status: RecordStatus = (
        "no build record" if state is None else "out of date" if stale else "up to date"
    )
    explained = ExplainedTarget(
        name=target.name,
        status=status,
        out_of_date=_relative(stale, config.root) if state is not None else None,
        recorded=rebuild is not None,
        refused=read.refused,
    )
    if state is not None and rebuild is not None:
        explained = _with_build(explained, config, state, rebuild)
    return replace(explained, lines=_lines(explained))


def _with_build(
    explained: ExplainedTarget, config: ProjectConfig, state: TargetState, rebuild: RebuildRecord
) -> ExplainedTarget:
    partitions = rebuild.partitions
    return replace(
        explained,
        output=_relative(state.output.path, config.root),
        earlier_build=rebuild.earlier_build,
        program=ProgramFacts(rebuild.kept, rebuild.why),
        counts=PartitionCounts(
            partitions=len(partitions),
            lowered=sum(1 for p in partitions if p.cache in LOWERED),
            from_cache=sum(1 for p in partitions if p.cache in ("hit", "rebased")),
        ),
        inputs=[ExplainedInput(**vars(i), words=input_words(i)) for i in rebuild.inputs],
        sources=[ExplainedSource(**vars(s), words=source_words(s)) for s in rebuild.sources],
        partitions=[_explained(p, rebuild.earlier_build) for p in partitions],
        edge_generation=_edge_generation(state) if not rebuild.kept else None,
    )


def _edge_generation(state: TargetState) -> dict[str, EdgeGeneration] | None:
    """Which way each method's edge generation ran, as the record's report says; None when it
    does not say (a record of an older lowerd)."""
    methods = state.report.methods
    paths = {name: m.edge_generation for name, m in methods.items() if m.edge_generation}
    return paths or None


def _explained(partition: PartitionFacts, earlier_build: bool) -> ExplainedPartition:
    where = (partition.method, partition.index, partition.backend, partition.site)
    told = (partition_label(partition), partition_words(partition, earlier_build))
    if partition.cache not in LOWERED:
        return ExplainedPartition(*where, partition.cache, partition.note, *told)
    return LoweredPartition(
        *where,
        partition.cache,
        partition.note,
        *told,
        previous=partition.previous,
        matched_by=partition.matched_by,
        changed=partition.changed,
        changed_weights=partition.changed_weights,
        key=partition.key,
        earlier_key=partition.earlier_key,
    )


# Words -----------------------------------------------------------------------------------------


def _lines(explained: ExplainedTarget) -> list[str]:
    lines = [f"{explained.name}: {_headline(explained)}"]
    program = explained.program
    if explained.recorded and program is not None:
        inputs, sources = explained.inputs or [], explained.sources or []
        # The changed inputs' own lines say why when they are the reason.
        said = inputs and program.why == INPUTS_CHANGED
        if explained.earlier_build and not program.kept and program.why and not said:
            lines.append(f"  lowered because {program.why}")
        lines += [f"  {INPUTS_CHANGED}: {i.words}" for i in inputs]
        lines += [f"  {source.words}" for source in sources]
        if explained.earlier_build:
            lowered = [p for p in explained.partitions or [] if p.cache in LOWERED]
            lines += [f"  {p.label}: {p.words}" for p in lowered]
        for method, generation in (explained.edge_generation or {}).items():
            lines.append(f"  edge generation of {method}: {generation.words}")
    if explained.status == "up to date":
        lines.append("  up to date: nothing it read or wrote has changed since")
    elif explained.status == "out of date":
        lines.append(f"  now out of date: {explained.out_of_date}")
    return lines


def _headline(explained: ExplainedTarget) -> str:
    if explained.status == "no build record" and explained.refused:
        return f"build record ignored ({explained.refused}); the target rebuilds"
    if explained.status == "no build record":
        return "no build record (never built, or its last build failed)"
    counts, program = explained.counts, explained.program
    if not explained.recorded or counts is None or program is None:
        return "built by a lowerd that did not record why; its next build will"
    total = counts.partitions
    if program.kept:
        kept = f"({_plural(total, 'partition')}, none lowered)"
        return f"program unchanged: kept {explained.output} {kept}"
    cached = f"({counts.from_cache} from the cache)"
    if not explained.earlier_build:
        return f"no earlier build: lowered {_plural(total, 'partition')} {cached}"
    if not total:
        return "rebuilt (no partitions delegated)"
    return f"rebuilt {counts.lowered} of {_plural(total, 'partition')} {cached}"


def partition_label(partition: PartitionFacts) -> str:
    """ "XNNPACK #7 (forward, models/transformer.py:41)"."""
    where = [partition.method]
    if partition.site:
        where.append(f"{partition.site[0]}:{partition.site[1]}")
    return f"{partition.backend} #{partition.index} ({', '.join(where)})"


def partition_words(partition: PartitionFacts, earlier_build: bool) -> str:
    """Why the partition was lowered afresh, or where it came from."""
    if partition.cache in ("hit", "rebased"):
        return "from the cache" + (
            " (debug handles renumbered)" if partition.cache == "rebased" else ""
        )
    if partition.cache == "kept":
        return "kept with the .pte"
    if partition.cache not in LOWERED:
        return "not served through lowerd's cache hook"
    if partition.key is None:
        return f"lowered without the cache: {partition.note or 'it has no key'}"
    stored = f" (not stored: {partition.note})" if partition.cache == "uncached" else ""
    if not earlier_build:
        return "no earlier build" + stored
    if partition.matched_by == "unrecorded":
        return "the earlier build's record kept no partitions to compare with (an older lowerd)"
    if partition.previous is None:
        return "a new partition: none of the earlier build's is left to match it" + stored
    if partition.earlier_key is None:
        return "the earlier build kept no key for it (the cache was off, or an older lowerd)"
    if not partition.changed:
        return (
            "its key is unchanged: the cache no longer held the blob "
            "(cleared, evicted, or another cache directory)" + stored
        )
    return "; ".join(_key_change_words(partition, name) for name in partition.changed) + stored


def _key_change_words(partition: PartitionFacts, name: str) -> str:
    words = KEY_WORDS.get(name, f"{name} changed")
    if name == "tensors" and partition.changed_weights:
        return f"{words} ({_some(partition.changed_weights, SHOWN_WEIGHTS)})"
    if name in ("torch_version", "executorch_version", "backend") and partition.earlier_key:
        old, new = getattr(partition.earlier_key, name), getattr(partition.key, name)
        return f"{words} ({old} → {new})"
    return words


def input_words(change: InputChange) -> str:
    """ "backend options {} → {"xnnpack": {"per_op_mode": true}}", "torch 2.12.0 → 2.13.0"."""
    if change.part == "unrecorded":
        return "config or tool versions (the earlier record did not say which)"
    if change.part in TOOLS:
        return f"{change.part} {_version(change.old)} → {_version(change.new)}"
    label = INPUT_WORDS.get(change.part, change.part)
    return f"{label} {_value(change.part, change.old)} → {_value(change.part, change.new)}"


def source_words(change: SourceChange) -> str:
    """ "models/transformer.py changed (lines 40-42)"."""
    if change.change == "added":
        return f"{change.path} is read now (the earlier build did not read it)"
    if change.change == "removed":
        return f"{change.path} is no longer read"
    if not change.lines:
        return f"{change.path} changed"
    ranges = [f"{a}" if a == b else f"{a}-{b}" for a, b in change.lines]
    noun = "line" if len(ranges) == 1 and "-" not in ranges[0] else "lines"
    return f"{change.path} changed ({noun} {_some(ranges, SHOWN_RANGES)})"


def _value(part: str, value: str | None) -> str:
    if value is None:
        return "(none)"
    value = value.removeprefix(f"{part}=")
    return value if len(value) <= SHOWN_VALUE_CHARS else value[: SHOWN_VALUE_CHARS - 1] + "…"


def _version(pinned: str | None) -> str:
    return pinned.partition("==")[2] if pinned else "(none)"


def _some(items: Sequence[str], shown: int) -> str:
    more = len(items) - shown
    return ", ".join(items[:shown]) + (f" and {more} more" if more > 0 else "")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _relative(text: str | None, root: Path) -> str | None:
    """A path or a reason naming one, with the project's folder left out as reports leave it."""
    if text is None:
        return None
    return text.replace(f"{root.resolve()}/", "").replace(f"{root}/", "")
