"""Whether a build keeps its last .pte: the program exported to the last build's, so lowering it
again would give the same bytes (a comment, a moved function, an unrelated edit).

The decision is a pure function of the exported program and the last build as `previous_build`
read it from the disk beforehand: it opens no file and runs no code, so it is decided the same
way every time for the same facts, and tested without a build. What it says in words is
`lowerd explain`'s answer (project/build_state.py why_program_not_kept, which a Ray build's
client says of its node's build too).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

from lowerd.lowering.program_fingerprint import ProgramFingerprint, moved_lines
from lowerd.lowering.stages import Exported
from lowerd.project.build_state import (
    TargetState,
    program_inputs_digest,
    target_inputs,
    why_outputs_not_kept,
    why_program_not_kept,
)
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.report_model import MethodReport

REUSE_OFF = "asked to lower afresh (reuse off)"


@dataclass(frozen=True)
class PreviousBuild:
    """The last build as the decision reads it: its record, and the facts about it that need the
    disk, gathered by previous_build."""

    state: TargetState | None  # the last build's record; this build is explained against it
    reuse: bool  # False: lower afresh whatever the record says (`--no-reuse`)
    # this build's configuration and tool versions, those that decide the program's bytes
    # (program_inputs_digest)
    inputs_digest: str
    # Why the last build's .pte or a data file beside it no longer stands (missing, modified);
    # None when they are as it wrote them, or when there is nothing to keep.
    outputs_changed: str | None = None


@dataclass(frozen=True)
class Reuse:
    """What the decision says: keep the last .pte (`kept`) or lower, and why, for the record."""

    why_lowered: str | None  # None: the last build's .pte is kept
    kept: TargetState | None  # the record whose .pte is kept; None when lowering
    # The last build's reports at the lines where the code is now: the kept .pte's, or shown
    # provisionally while the program is lowered afresh. Empty without a record to keep from.
    reports: Mapping[str, MethodReport]


def previous_build(
    config: ProjectConfig, target: TargetConfig, state: TargetState | None, reuse: bool
) -> PreviousBuild:
    """The last build's record with what the decision needs from the disk: whether its outputs
    are still as it wrote them (stat, and a hash when the stat moved)."""
    outputs = why_outputs_not_kept(config, target, state) if state and reuse else None
    inputs = program_inputs_digest(target_inputs(config, target))
    return PreviousBuild(state, reuse, inputs, outputs)


def decide_reuse(target: TargetConfig, exported: Exported, previous: PreviousBuild) -> Reuse:
    """Keep the last .pte when the target's methods exported to the programs of its last build,
    lowered the same way, and its outputs are as it wrote them; else say why not."""
    program = exported.fingerprint
    state = previous.state if previous.reuse else None
    if state is None and previous.state is not None:
        why: str | None = REUSE_OFF
    else:
        digests = program.digests if program else None
        why = why_program_not_kept(target, state, digests, previous.inputs_digest)
        why = why or previous.outputs_changed
    reports = previous_reports(state, program) if state and program else {}
    return Reuse(why, state if why is None else None, reports)


def previous_reports(previous: TargetState, program: ProgramFingerprint) -> dict[str, MethodReport]:
    """The last build's method reports, for the methods the program still has, their source lines
    moved to where the code is now."""
    methods = {}
    for name, report in previous.report.methods.items():
        if name in program.lines:
            moves = moved_lines(previous.method_lines.get(name, []), program.lines[name])
            # A copy: with_lines_moved moves in place, and the record stays as it was read.
            methods[name] = copy.deepcopy(report).with_lines_moved(moves)
    return methods
