"""A digest per exported method, and the user line of each of its nodes.

Two exports with equal digests lower to the same bytes: the digest covers the graph in order
(without run-specific or provenance metadata), the weights' contents, dynamic-shape ranges, the
backends with their partitioner options, the edge and emit configs and the tool versions — the
partition key's encoding applied to the whole program. The lines are kept beside it so that a
report reused after a comment edit can point at moved code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lowerd.lowering.partition_key import Unkeyable, key_details
from lowerd.project.source_map import UserFiles

SourceLines = list[list[Any] | None]  # per node in graph order: [file, line] or None


@dataclass
class ProgramFingerprint:
    digests: dict[str, str]
    lines: dict[str, SourceLines]


def fingerprint(
    exported: dict[str, Any],
    backends: tuple[str, ...],
    user_files: UserFiles,
    backend_options: dict[str, dict[str, Any]] | None = None,
    lowering_options: dict[str, Any] | None = None,
) -> ProgramFingerprint | None:
    """None when a method holds a value with no stable encoding: it is then always lowered.

    `lowering_options`: the edge and emit configs, transform passes and constant methods
    (TargetConfig.lowering_options()), which change the edge program or the emitted bytes."""
    label = "+".join(backends)
    if backend_options:  # without options, the digests of before options existed
        label += " " + json.dumps(backend_options, sort_keys=True)
    if lowering_options:
        label += " lowering " + json.dumps(lowering_options, sort_keys=True)
    try:
        digests = {
            name: key_details(
                label + _keyword_inputs(program), [program], [[]], whole_ranges=True
            ).digest()
            for name, program in exported.items()
        }
    except Unkeyable:
        return None
    return ProgramFingerprint(digests, {n: _lines(p, user_files) for n, p in exported.items()})


def _keyword_inputs(program: Any) -> str:
    """The program's input structure when it takes keyword inputs: the graph alone does not
    tell `f(x)` from `f(x=...)`, whose programs differ. A program of positional inputs only
    keeps the digest it had before keyword inputs existed."""
    in_spec = program.call_spec.in_spec  # (args, kwargs)
    if in_spec is None or in_spec.num_children != 2 or not in_spec.child(1).context:
        return ""
    return f" inputs {in_spec}"


def _lines(program: Any, user_files: UserFiles) -> SourceLines:
    lines: SourceLines = []
    for node in program.graph.nodes:
        source = user_files.innermost_in_stack_trace(node.meta.get("stack_trace"))
        lines.append([user_files.display(source.file), source.line] if source else None)
    return lines


def moved_lines(old: SourceLines, new: SourceLines) -> dict[tuple[str, int], tuple[str, int]]:
    """Where each old source line went, matching the nodes of two equal programs in order."""
    moves: dict[tuple[str, int], tuple[str, int]] = {}
    for before, after in zip(old, new, strict=False):
        if before and after:
            moves.setdefault((before[0], before[1]), (after[0], after[1]))
    return moves
