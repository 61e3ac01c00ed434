"""A Ray task's payload (cli/ray_task.py) made this machine's: the target's result, its .pte and
data files written as a local build writes them, its build record.

The task built in a copy of the project at another path, into a folder of its own, so every path
it reports is mapped back to this project's root and out_dir. The result then equals a local
build's (but for `seconds`), and the record lets the next local `lowerd build` answer up to date:
each source it lists is stamped here, with this file's size and mtime, when its content is what
the task read; a source that differs (edited after the project was sent) or was saved after this
build started leaves no record, as a local build that saw a save mid-build leaves none.

The record's account of the build for `lowerd explain` (its `rebuild`) is made here again: the
task built in a copy with no earlier record, so it compared with nothing. This machine's earlier
record is what a local build compares with, through the same functions (project/build_state.py
why_not_kept, project/rebuild_record.py record_rebuild), given the task's partitions.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from lowerd.cache.atomic import write_atomic
from lowerd.project.build_state import (
    FileStamp,
    TargetState,
    file_digest,
    forget_state,
    inputs_digest,
    load_state,
    owned_data_files,
    save_state,
    state_path,
    target_inputs,
    why_not_kept,
)
from lowerd.project.config import ProjectConfig, TargetConfig
from lowerd.project.disk_errors import record_written
from lowerd.project.rebuild_record import RebuildRecord, record_rebuild
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, decode_as

# As lowering/build.py's: file systems stamp mtimes with a coarse clock, a few ms behind
# time.time_ns(), so a file saved just after the build started can carry an mtime before it.
MTIME_GRANULARITY_NS = 50_000_000


class PathMap:
    """The task's root and out_dir, as it reported them, replaced by this project's."""

    def __init__(self, payload: dict[str, Any], config: ProjectConfig):
        pairs = {
            str(payload["out_dir"]): str(config.out_dir),
            str(payload["root"]): str(config.root),
        }
        # The longer first: should one folder hold the other, its paths map as the inner one.
        self.pairs = sorted(pairs.items(), key=lambda pair: -len(pair[0]))

    def text(self, text: str) -> str:
        for theirs, ours in self.pairs:
            if text == theirs:
                return ours
            text = text.replace(theirs + os.sep, ours + os.sep)
        return text

    def value(self, value: Any) -> Any:
        """Every string inside a JSON-like value mapped (file fields, paths in messages, and keys:
        the record's source_lines are keyed by path)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(key): self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value


def take_payload(
    config: ProjectConfig, target: TargetConfig, payload: dict[str, Any], started_ns: int
) -> TargetResult:
    """The target's result; on success its outputs written here and its record saved."""
    paths = PathMap(payload, config)
    result = decode(TargetResult, paths.value(payload["result"]))
    if not result.ok:
        return result  # Batch.outcome() removes its old outputs, as a local build's
    files: dict[str, bytes] = payload["files"]
    problem = _check_files(config, result, files)
    if problem is not None:
        return TargetResult.failed(target.name, "executor-error", problem)
    record = paths.value(payload["record"]) if payload.get("record") else None
    # Read before the outputs replace them: whether the earlier .pte could have been kept asks
    # whether it is still on disk, as a local build asks before it writes.
    earlier = load_state(config, target)
    why = _why_lowered(config, target, earlier, record) if record else None
    _write_outputs(config, target, result, files)
    state = _local_state(config, target, record, started_ns, earlier, why) if record else None

    def write_record() -> None:
        if state is None:
            forget_state(config, target)
        else:
            save_state(config, target, state)

    said = record_written(config, target.name, state_path(config, target), write_record)
    return replace(result, warnings=said or None)


def _check_files(
    config: ProjectConfig, result: TargetResult, files: dict[str, bytes]
) -> str | None:
    """Why the files received are not the ones the result names, if they are not."""
    expected = {result.output or "": result.sha256, **{f.path: f.sha256 for f in result.data_files}}
    for path, sha256 in expected.items():
        data = files.get(Path(path).name)
        if Path(path).parent != config.out_dir or data is None:
            return f"the Ray task sent no {path}"
        if hashlib.sha256(data).hexdigest() != sha256:
            return f"the Ray task sent {path} with other bytes than its sha256 says"
    return None


def _write_outputs(
    config: ProjectConfig, target: TargetConfig, result: TargetResult, files: dict[str, bytes]
) -> None:
    """As lowering/build.py writes them: data files first (a reader that sees the new .pte finds
    its data beside it), then the .pte, each atomically; then the data files of an earlier build
    that this one no longer makes are removed."""
    output = Path(result.output or "")
    output.parent.mkdir(parents=True, exist_ok=True)
    stale = owned_data_files(config, target)
    for data_file in result.data_files:
        write_atomic(Path(data_file.path), files[Path(data_file.path).name], mode=0o644)
    write_atomic(output, files[output.name], mode=0o644)
    for path in stale - {Path(data_file.path) for data_file in result.data_files}:
        path.unlink(missing_ok=True)


def _why_lowered(
    config: ProjectConfig, target: TargetConfig, earlier: TargetState | None, record: dict[str, Any]
) -> str:
    """Why a local build of the program the task exported would have lowered it."""
    digests = record["method_digests"] or None  # none recorded: the program had no digest
    why = why_not_kept(config, target, earlier, digests)
    return why or "a Ray build always lowers: the earlier .pte it would keep is on this machine"


def _local_state(
    config: ProjectConfig,
    target: TargetConfig,
    record: dict[str, Any],
    started_ns: int,
    earlier: TargetState | None,
    why: str | None,
) -> TargetState | None:
    """The task's record with this machine's stamps, its build explained against `earlier`;
    None when a source is not as the task read it, or was saved after this build started (the
    next build must run)."""
    sources = []
    for source in record["sources"]:
        stamp = _stamp_if_same(Path(source["path"]), source["sha256"])
        if stamp is None or stamp.mtime_ns >= started_ns - MTIME_GRANULARITY_NS:
            return None
        sources.append(stamp)
    result = decode(TargetResult, record["report"])
    # The task refused to build with other tool versions or another config: this machine's
    # inputs are the ones its build stands for (the task's, but for the copy's root).
    inputs = target_inputs(config, target)
    state = TargetState(
        target=target.name,
        inputs_digest=inputs_digest(inputs),
        inputs=inputs,
        sources=sources,
        source_lines=record["source_lines"],
        output=FileStamp.of(Path(result.output or ""), result.sha256),
        method_digests=record["method_digests"],
        method_lines=record["method_lines"],
        report=result,
        data_files=[FileStamp.of(Path(f.path), f.sha256) for f in result.data_files],
        peak_rss=record.get("peak_rss"),
    )
    task = decode_as(RebuildRecord | None, record.get("rebuild"))
    if task is not None:  # its partitions as the node lowered them, compared with none
        state.rebuild = record_rebuild(config.root, earlier, state, why, task.partitions)
    return state


def _stamp_if_same(path: Path, sha256: str) -> FileStamp | None:
    try:
        if file_digest(path) != sha256:
            return None
        return FileStamp.of(path, sha256)
    except OSError:
        return None
