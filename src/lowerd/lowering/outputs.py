"""The target's outputs on disk, the last stage: Emitted -> Written, or the last build's kept.

Others may be reading the outputs (an app's bundle step, a device push, an editor): each file is
written atomically, the data files before the .pte that needs them, and the data files an
earlier build left that this one no longer makes are removed after.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from lowerd.cache.atomic import write_atomic
from lowerd.lowering.stages import BuildContext, Emitted, Written
from lowerd.project.build_state import TargetState, owned_data_files
from lowerd.project.disk_errors import writing_in_out_dir
from lowerd.project.rebuild_record import kept_partitions
from lowerd.project.report_model import MethodReport
from lowerd.project.result import CacheSummary, DataFile


def write(ctx: BuildContext, emitted: Emitted) -> Written:
    """Writes the outputs; a disk that refuses one is an OutputError at out_dir."""
    ctx.stage("write")
    output = ctx.config.output_path(ctx.target.name)
    with writing_in_out_dir(ctx.config, output.parent):
        output.parent.mkdir(parents=True, exist_ok=True)
    stale = owned_data_files(ctx.config, ctx.target)
    # The data files first: a reader that sees the new .pte finds its data beside it.
    data_files = []
    for data_file in emitted.data_files:
        with writing_in_out_dir(ctx.config, data_file.path):
            write_atomic(data_file.path, data_file.data, mode=0o644)
        digest = hashlib.sha256(data_file.data).hexdigest()
        data_files.append(DataFile(str(data_file.path), digest, data_file.kind))
    # Readers see the old .pte or the new one, never a half-written one; others may read it.
    with writing_in_out_dir(ctx.config, output):
        write_atomic(output, emitted.buffer, mode=0o644)
    for path in stale - {Path(data_file.path) for data_file in data_files}:
        with writing_in_out_dir(ctx.config, path, "the stale data file", "remove"):
            path.unlink(missing_ok=True)
    return Written(
        output=str(output),
        sha256=hashlib.sha256(emitted.buffer).hexdigest(),
        methods=emitted.reports,
        data_files=tuple(data_files),
        sizes=emitted.sizes,
        cache=emitted.cache,
        partitions=emitted.partitions,
        seconds=ctx.seconds(),
        needs=emitted.needs,
    )


def keep(ctx: BuildContext, state: TargetState, reports: Mapping[str, MethodReport]) -> Written:
    """The .pte and data files `state`'s build wrote, as they are on disk, with its `reports`
    (the decision's: at the lines where the code is now)."""
    recorded = state.report
    earlier = state.rebuild.partitions if state.rebuild else []
    return Written(
        output=state.output.path,
        sha256=state.output.sha256,
        # No edge generation ran: the last build's path is not this build's.
        methods={name: report.kept() for name, report in reports.items()},
        data_files=tuple(recorded.data_files),
        sizes=recorded.sizes,  # the same .pte
        cache=CacheSummary(),
        partitions=tuple(kept_partitions(dict(reports), earlier)),
        seconds=ctx.seconds(),
        reused="same-program",
        needs=recorded.runtime.needs if recorded.runtime else None,  # the same .pte
    )
