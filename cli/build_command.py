"""`lowerd build`: build the selected targets in-process, or several at once in worker processes."""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from lowerd.lowering.build_state import up_to_date_report
from lowerd.lowering.config import (
    ProjectConfig,
    TargetConfig,
    find_config,
    load_config,
    select_targets,
)
from lowerd.lowering.project_store import store_for
from lowerd.main import EXIT_OK, EXIT_TARGET_FAILED, print_json
from lowerd.report_table import format_report


def run_build(
    config_path: str | None,
    target_names: Sequence[str],
    as_json: bool,
    use_cache: bool,
    jobs: int,
) -> int:
    config = load_config(Path(config_path) if config_path else find_config(Path.cwd()))
    targets = select_targets(config, target_names)
    started = time.perf_counter()
    done = {t.name: r for t in targets if use_cache and (r := _up_to_date(config, t))}
    stale = [target for target in targets if target.name not in done]
    if jobs > 1 and len(stale) > 1:
        done.update(_build_in_workers(config, stale, use_cache, jobs))
    else:
        done.update((target.name, _build_here(config, target, use_cache)) for target in stale)
    results = [done[target.name] for target in targets]
    document = {"config": str(config.path), "targets": results}
    if use_cache and any(result["cache"]["misses"] for result in results):
        store_for(config).enforce_limit()  # only a build that stored blobs can exceed the cap
    if as_json:
        print_json(document)
    else:
        print(format_report(document, time.perf_counter() - started), end="")
    failed = any(result["status"] != "ok" for result in results)
    return EXIT_TARGET_FAILED if failed else EXIT_OK


def _up_to_date(config: ProjectConfig, target: TargetConfig) -> dict | None:
    started = time.perf_counter()
    report = up_to_date_report(config, target)
    return report and {**report, "seconds": round(time.perf_counter() - started, 3)}


def _build_here(config: ProjectConfig, target: TargetConfig, use_cache: bool) -> dict:
    from lowerd.lowering.build import build_target  # imports torch: only when there is work

    progress = _print_progress if sys.stderr.isatty() else None
    store = store_for(config) if use_cache else None
    result = build_target(config, target, store, progress, reuse=use_cache)
    if progress:
        sys.stderr.write("\r\033[K")
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
        return {
            "name": target.name,
            "status": "error",
            "seconds": 0.0,
            "error": {"kind": "worker-crash", "message": message, "file": None, "line": None},
        }


def _build_in_worker(config_path: str, target_name: str, use_cache: bool) -> dict:
    config = load_config(Path(config_path))
    [target] = select_targets(config, [target_name])
    return _build_here(config, target, use_cache)


def _print_progress(stage: str, target: str, detail: str | None) -> None:
    text = f"[{target}] {stage}" + (f" {detail}" if detail else "")
    sys.stderr.write(f"\r\033[K{text[:120]}")
    sys.stderr.flush()
