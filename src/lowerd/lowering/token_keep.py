"""Keep the last .pte without running the entry when only comments and layout changed.

An edit of comments, blank lines or the spaces between tokens leaves a Python source's token
stream as it was (project/source_tokens.py), and the interpreter runs tokens: the entry would
build the same model, export the same program and lower it to the same bytes, as every other
keep already shows by exporting (lowering/reuse.py). Exporting costs seconds on a real model
(load and export of a 32-layer Llama: about 8 s), so the build record keeps each source's stream
and this keep is decided before the entry is loaded, from the record and the disk only, when:

- every input the last build recorded is unchanged (its config, tool versions, runtime and
  verify settings: all of target_inputs), and so are the module files it imported from outside
  the project (project/library_stamp.py): a new transformers is a new program;
- every recorded source is unchanged, or is a Python file the build read as code, not as data
  (lowering/inputs.py tells the opens apart), whose new bytes tokenize to the recorded stream and
  compile (a syntax error is left for a build to report at its line); at least one changed;
- the last build's program could be kept at all (lowering/reuse.py's conditions: no ETRecord,
  whose lines would move, no transform passes or custom partitioners, a digest it had) and its
  outputs are as it wrote them;
- the target neither verifies nor bundles: both need the eager model's outputs;
- every line the last result names in an edited file has one place in the new text (LineMap).

Tokens leave out one thing the interpreter can see: line numbers. A model that computes with
its own lines (a frame's f_lineno, a traceback's text) is the one program this keep would not
see change; lowerd assumes none does, as the up-to-date check assumes an entry is a function of
the files it read. The lines that do reach the exported program, its nodes' stack traces, are
provenance: neither the program's digest nor the .pte holds them (an ETRecord does: never kept).

The result is the last one with every line moved (project/line_moves.py), `reused` SAME_SOURCE;
the record is the last one with the new stamps, streams and node lines. Anything not shown here
does the full build, which keeps the .pte by the program's digest if it can. `lowerd build`
asks before it imports torch (kept_before_import), the daemon's worker before the entry loads.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from lowerd.lowering.stages import BuildContext
from lowerd.project.build_state import (
    FileStamp,
    TargetState,
    forget_state,
    load_state,
    program_inputs_digest,
    save_state,
    stamp_files,
    state_path,
    target_inputs,
    why_outputs_not_kept,
    why_program_not_kept,
)
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.disk_errors import writing_in_out_dir
from lowerd.project.errors import LowerdError
from lowerd.project.line_moves import LineMoves, NodeLines
from lowerd.project.rebuild_record import kept_partitions, line_checksums, record_rebuild
from lowerd.project.result import CacheSummary, TargetResult
from lowerd.project.source_tokens import LineMap, SourceTokens, compiles, line_map, source_tokens

SAME_SOURCE = "same-source"
# A stamp whose mtime is this close to now may share its clock tick with a save still to come:
# it is recorded without its mtime, so that its content decides (FileStamp.unchanged).
_MTIME_GRANULARITY_NS = 50_000_000


@dataclass(frozen=True)
class _Edit:
    """A recorded source whose bytes changed and whose tokens did not."""

    sha256: str  # of the bytes read
    tokens: SourceTokens
    lines: LineMap


def keep_same_source(
    ctx: BuildContext, earlier: TargetState | None, reuse: bool
) -> TargetResult | None:
    """The last build's result at the lines where the code is now, its record updated, when
    only comments and layout changed since (the module docstring says when); else None."""
    if not reuse or earlier is None or _why_not_kept(ctx, earlier) is not None:
        return None
    edits = _edits(earlier)
    if not edits:
        return None
    moves = LineMoves({ctx.user_files.display(path): edit.lines for path, edit in edits.items()})
    moved, node_lines = moves.moved(earlier.report), moves.node_lines(earlier.method_lines)
    if moved is None or node_lines is None:
        return None
    methods = {name: report.kept() for name, report in moved.methods.items()}
    result = replace(moved, seconds=ctx.seconds(), cache=CacheSummary(), memo={}, methods=methods)
    result = replace(result, reused=SAME_SOURCE)
    with writing_in_out_dir(ctx.config, state_path(ctx.config, ctx.target), "build record"):
        _record(ctx, earlier, edits, result, node_lines)
    return result


def kept_before_import(config: ProjectConfig, target: TargetConfig) -> TargetResult | None:
    """keep_same_source for a command that has not imported torch yet (`lowerd build` in a
    fresh process): its record read, no code of the user's run; None where a build must decide,
    a disk that refuses the record included (the build then says so)."""
    ctx = BuildContext.start(config, target, None, _quiet, None)
    try:
        return keep_same_source(ctx, load_state(config, target), reuse=True)
    except LowerdError:
        return None


def _quiet(stage: str, target: str, detail: str | None) -> None:
    """No stage runs: there is nothing to say."""


def _why_not_kept(ctx: BuildContext, earlier: TargetState) -> str | None:
    target, config = ctx.target, ctx.config
    inputs = target_inputs(config, target)
    if target.verify or target.bundled:
        return "the eager model's outputs are needed"
    if earlier.inputs != inputs or not earlier.method_digests:
        return "an input changed, or the program had no digest"
    if earlier.libraries is None or not earlier.libraries.unchanged():
        return "the libraries' modules changed"
    digests, program_inputs = earlier.method_digests, program_inputs_digest(inputs)
    why = why_program_not_kept(target, earlier, digests, program_inputs)
    return why or why_outputs_not_kept(config, target, earlier)


def _edits(earlier: TargetState) -> dict[str, _Edit] | None:
    """Each changed source's edit; None when one changed in more than its layout."""
    edits = {}
    for source in earlier.sources:
        if source.unchanged():
            continue
        recorded = earlier.source_tokens.get(source.path)
        edit = _edit(source.path, recorded) if recorded is not None else None
        if edit is None:
            return None
        edits[source.path] = edit
    return edits


def _edit(path: str, recorded: SourceTokens) -> _Edit | None:
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    tokens = source_tokens(data)
    lines = line_map(recorded, tokens) if tokens is not None else None
    if tokens is None or lines is None or not compiles(data, path):
        return None
    return _Edit(hashlib.sha256(data).hexdigest(), tokens, lines)


def _record(
    ctx: BuildContext,
    earlier: TargetState,
    edits: dict[str, _Edit],
    result: TargetResult,
    node_lines: NodeLines,
) -> None:
    """The last record with the sources as they are now; forgotten when one was saved again
    since it was read (the keep was decided on other bytes)."""
    decided = {
        s.path: edits[s.path].sha256 if s.path in edits else s.sha256 for s in earlier.sources
    }
    sources = [_trusted(stamp) for stamp in stamp_files(Path(path) for path in decided)]
    if {stamp.path: stamp.sha256 for stamp in sources} != decided:
        forget_state(ctx.config, ctx.target)
        return
    tokens = {**earlier.source_tokens, **{path: edit.tokens for path, edit in edits.items()}}
    state = replace(
        earlier,
        sources=sources,
        source_lines=line_checksums(decided),
        source_tokens=tokens,
        method_lines=node_lines,
        report=result,
    )
    earlier_partitions = earlier.rebuild.partitions if earlier.rebuild else []
    partitions = kept_partitions(dict(result.methods), earlier_partitions)
    rebuild = record_rebuild(ctx.config.root, earlier, state, None, partitions)
    save_state(ctx.config, ctx.target, replace(state, rebuild=rebuild))


def _trusted(stamp: FileStamp) -> FileStamp:
    """The stamp, its mtime dropped when a save in the same clock tick could keep it."""
    import time

    if stamp.mtime_ns >= time.time_ns() - _MTIME_GRANULARITY_NS:
        return replace(stamp, mtime_ns=0)
    return stamp
