"""`lowerd build`: build the selected targets in-process, or several at once in worker processes."""

from __future__ import annotations

import gc
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from lowerd.build_output import print_outcome, progress_printer
from lowerd.lowering.batch import Batch, failed_result
from lowerd.lowering.config import (
    ProjectConfig,
    TargetConfig,
    find_config,
    load_config,
    select_targets,
)
from lowerd.lowering.project_store import store_for


def run_build(
    config_path: str | None,
    target_names: Sequence[str],
    as_json: bool,
    use_cache: bool,
    jobs: int,
) -> int:
    started = time.perf_counter()
    path = Path(config_path) if config_path else find_config(Path.cwd())
    batch = Batch.load(path, target_names, use_cache)
    batch.answer_up_to_date()
    config, stale = batch.config, batch.stale
    if jobs > 1 and len(stale) > 1:
        batch.results.update(_build_in_workers(config, stale, use_cache, jobs))
    else:
        for target in stale:
            batch.results[target.name] = _build_here(config, target, use_cache)
    document, exit_code = batch.outcome()
    print_outcome(document, as_json, time.perf_counter() - started)
    return exit_code


def _build_here(config: ProjectConfig, target: TargetConfig, use_cache: bool) -> dict:
    from lowerd.lowering.build import build_target  # imports torch: only when there is work

    gc.freeze()  # torch's and ExecuTorch's objects never die: spare every collection the scan

    progress = progress_printer()
    store = store_for(config) if use_cache else None
    result = build_target(config, target, store, progress, reuse=use_cache)
    if progress:
        progress.clear()
    return result.to_json()


def _build_in_workers(
    config: ProjectConfig, targets: list[TargetConfig], use_cache: bool, jobs: int
) -> list[tuple[str, dict]]:
    # spawn, not fork: each worker imports user code into a clean interpreter, and no torch
    # threads are inherited mid-flight.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(targets)), mp_context=context) as pool:
        futures = [
            pool.submit(_build_in_worker, str(config.path), target.name, use_cache)
            for target in targets
        ]
        return [
            (target.name, _result_or_crash(future, target))
            for future, target in zip(futures, targets, strict=True)
        ]


def _result_or_crash(future: Future, target: TargetConfig) -> dict:
    try:
        return future.result()
    except Exception as error:  # the worker died (segfault, OOM kill) or could not start
        message = f"build worker failed: {type(error).__name__}: {error}"
        return failed_result(target.name, "worker-crash", message)


def _build_in_worker(config_path: str, target_name: str, use_cache: bool) -> dict:
    config = load_config(Path(config_path))
    [target] = select_targets(config, [target_name])
    return _build_here(config, target, use_cache)
