"""`lowerd build` in-process: each stale target builds in a fork of this process.

This process imports torch and ExecuTorch once; each target's user code then runs in a forked
worker, supervised as the daemon's are (worker/local_builds.py, worker/workers.py), so a model
that calls os._exit or crashes ends only its worker, and a worker that ends without a result is
a `worker-crash` at the target's entry function. `--jobs N` runs up to N workers at once.
"""

from __future__ import annotations

from lowerd.cli.build_output import BuildAsk, progress_printer
from lowerd.cli.exit_codes import exit_code
from lowerd.project.batch import Batch
from lowerd.project.config import choose_config
from lowerd.project.project_store import store_for
from lowerd.worker.local_builds import (
    build_in_workers,
    import_build_modules,
    kept_before_import,
    local_job,
)


def run_build(ask: BuildAsk) -> int:
    """The build in forks of this process; --jobs defaults to 1 (each job pays its own imports)."""
    batch = Batch.load(choose_config(ask.config_path), ask.target_names, ask.use_cache)
    batch.answer_up_to_date()
    if ask.use_cache:  # only comments and layout changed: kept before torch is imported
        for target in batch.stale:
            if (kept := kept_before_import(batch.config, target)) is not None:
                batch.results[target.name] = kept
    if batch.stale:
        import_build_modules(store_for(batch.config) if ask.use_cache else None)
        progress = progress_printer()
        try:
            work = {t.name: local_job(batch.config, t, ask.use_cache) for t in batch.stale}
            batch.results.update(build_in_workers(work, ask.jobs or 1, progress))
        finally:
            if progress:
                progress.clear()
    document, outcome = batch.outcome()
    ask.print_outcome(document)
    return exit_code(outcome)
