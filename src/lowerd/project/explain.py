"""`lowerd explain`: why the last build of each target did what it did, in words.

Read from the build records (project/rebuild_record.py), never from a build: torch-free, so the
command line answers at once and the language server's `lowerd.explain` command (the editor's
*Explain this rebuild*) answers from its own process. Both give the document made here; its
`lines` are what the command prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lowerd.project.build_state import TargetState, load_state, why_out_of_date
from lowerd.project.config import ProjectConfig, TargetConfig, select_targets
from lowerd.project.errors import ConfigError
from lowerd.project.rebuild_record import (
    INPUTS_CHANGED,
    LOWERED,
    InputChange,
    PartitionFacts,
    RebuildRecord,
    SourceChange,
)
from lowerd.project.wire import encode

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


def explain_answer(config: ProjectConfig | None, names: Sequence[str]) -> dict[str, Any]:
    """The language server's answer: the document, or `error` when there is nothing to explain."""
    if config is None:
        return {"targets": [], "error": "no lowerd project is loaded"}
    try:
        return explain_targets(config, names)
    except ConfigError as error:
        return {"targets": [], "error": str(error)}


def explain_targets(config: ProjectConfig, names: Sequence[str]) -> dict[str, Any]:
    """The named targets (all, without names) explained; an unknown name is a ConfigError."""
    return {"targets": [explain_target(config, t) for t in select_targets(config, names)]}


def explain_target(config: ProjectConfig, target: TargetConfig) -> dict[str, Any]:
    state = load_state(config, target)
    stale = why_out_of_date(config, target, state)
    document: dict[str, Any] = {
        "name": target.name,
        "status": "no build record" if state is None else "out of date" if stale else "up to date",
        "out_of_date": _relative(stale, config.root) if state is not None else None,
        "recorded": state is not None and state.rebuild is not None,
    }
    rebuild = state.rebuild if state is not None else None
    if state is not None and rebuild is not None:
        document.update(_build_document(config, state, rebuild))
    document["lines"] = _lines(document, target.name)
    return document


def _build_document(
    config: ProjectConfig, state: TargetState, rebuild: RebuildRecord
) -> dict[str, Any]:
    partitions = rebuild.partitions
    lowered = [p for p in partitions if p.cache in LOWERED]
    return {
        "output": _relative(state.output.path, config.root),
        "earlier_build": rebuild.earlier_build,
        "program": {"kept": rebuild.kept, "why": rebuild.why},
        "counts": {
            "partitions": len(partitions),
            "lowered": len(lowered),
            "from_cache": sum(1 for p in partitions if p.cache in ("hit", "rebased")),
        },
        "inputs": [{**vars(change), "words": input_words(change)} for change in rebuild.inputs],
        "sources": [{**vars(change), "words": source_words(change)} for change in rebuild.sources],
        "partitions": [_partition_document(p, rebuild.earlier_build) for p in partitions],
    }


def _partition_document(partition: PartitionFacts, earlier_build: bool) -> dict[str, Any]:
    document = {
        "method": partition.method,
        "index": partition.index,
        "backend": partition.backend,
        "site": partition.site,
        "cache": partition.cache,
        "note": partition.note,
    }
    if partition.cache in LOWERED:
        document |= {
            "previous": partition.previous,
            "matched_by": partition.matched_by,
            "changed": partition.changed,
            "changed_weights": partition.changed_weights,
            "key": encode(partition.key),
            "earlier_key": encode(partition.earlier_key),
        }
    document["label"] = partition_label(partition)
    document["words"] = partition_words(partition, earlier_build)
    return document


# Words -----------------------------------------------------------------------------------------


def _lines(document: dict[str, Any], name: str) -> list[str]:
    lines = [f"{name}: {_headline(document)}"]
    if document.get("recorded"):
        program = document["program"]
        # The changed inputs' own lines say why when they are the reason.
        said = document["inputs"] and program["why"] == INPUTS_CHANGED
        if document["earlier_build"] and not program["kept"] and program["why"] and not said:
            lines.append(f"  lowered because {program['why']}")
        lines += [f"  {INPUTS_CHANGED}: {i['words']}" for i in document["inputs"]]
        lines += [f"  {source['words']}" for source in document["sources"]]
        if document["earlier_build"]:
            lines += [
                f"  {p['label']}: {p['words']}"
                for p in document["partitions"]
                if p["cache"] in LOWERED
            ]
    if document["status"] == "up to date":
        lines.append("  up to date: nothing it read or wrote has changed since")
    elif document["status"] == "out of date":
        lines.append(f"  now out of date: {document['out_of_date']}")
    return lines


def _headline(document: dict[str, Any]) -> str:
    if document["status"] == "no build record":
        return "no build record (never built, or its last build failed)"
    if not document["recorded"]:
        return "built by a lowerd that did not record why; its next build will"
    counts = document["counts"]
    total = counts["partitions"]
    if document["program"]["kept"]:
        return (
            f"program unchanged: kept {document['output']} "
            f"({_plural(total, 'partition')}, none lowered)"
        )
    cached = f"({counts['from_cache']} from the cache)"
    if not document["earlier_build"]:
        return f"no earlier build: lowered {_plural(total, 'partition')} {cached}"
    if not total:
        return "rebuilt (no partitions delegated)"
    return f"rebuilt {counts['lowered']} of {_plural(total, 'partition')} {cached}"


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
