"""`lowerd build` in-process: each stale target builds in a fork of this process.

This process imports torch and ExecuTorch once; each target's user code then runs in a forked
worker, supervised as the daemon's are (worker/local_builds.py, worker/workers.py), so a model
that calls os._exit or crashes ends only its worker, and a worker that ends without a result is
a `worker-crash` at the target's entry function. `--jobs N` runs up to N workers at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from lowerd.cli.build_output import print_outcome, progress_printer
from lowerd.cli.exit_codes import exit_code
from lowerd.cli.report_table import ReportView
from lowerd.project.batch import Batch
from lowerd.project.config import choose_config
from lowerd.project.project_store import store_for
from lowerd.worker.local_builds import build_in_workers, import_build_modules, local_job


def run_build(
    config_path: str | None,
    target_names: Sequence[str],
    as_json: bool,
    use_cache: bool,
    jobs: int,
    view: ReportView | None = None,
) -> int:
    started = time.perf_counter()
    path = choose_config(config_path)
    batch = Batch.load(path, target_names, use_cache)
    batch.answer_up_to_date()
    if batch.stale:
        import_build_modules(store_for(batch.config) if use_cache else None)
        progress = progress_printer()
        try:
            work = {t.name: local_job(batch.config, t, use_cache) for t in batch.stale}
            batch.results.update(build_in_workers(work, jobs, progress))
        finally:
            if progress:
                progress.clear()
    document, outcome = batch.outcome()
    print_outcome(document, as_json, time.perf_counter() - started, view)
    return exit_code(outcome)
