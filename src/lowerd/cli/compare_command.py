"""`lowerd compare TARGET`: the target lowered with each backend alone, side by side.

Through the project's daemon when one runs (or --daemon starts one), in its warm workers; else
in forked workers of this process, as an in-process `lowerd build` builds. Either way the
builds are the ones project/compare.py describes: private outputs, the shared blob cache.
"""

from __future__ import annotations

import json
import sys
import time

from lowerd.cli.build_output import progress_printer
from lowerd.cli.exit_codes import exit_code
from lowerd.project.batch import Outcome
from lowerd.project.compare import CompareBatch
from lowerd.project.compare_result import CompareResult
from lowerd.project.config import choose_config
from lowerd.project.wire import decode, encode


def run_compare(
    config_path: str | None,
    target_name: str,
    backends: str | None,
    as_json: bool,
    use_cache: bool,
    jobs: int,
    daemon: bool | None,
) -> int:
    """`daemon`: True to start one if none runs, False never to use one, None to use a running
    one."""
    started = time.perf_counter()
    path = choose_config(config_path)
    batch = CompareBatch.load(path, target_name, backends, use_cache)  # usage errors first
    if daemon is not False:
        answer = _via_daemon(batch, start=bool(daemon))
        if answer is not None:
            if isinstance(answer, int):
                return answer
            return _show(*answer, as_json, time.perf_counter() - started)
    return _show(*compare_in_process(batch, jobs), as_json, time.perf_counter() - started)


def compare_in_process(batch: CompareBatch, jobs: int) -> tuple[CompareResult, Outcome]:
    """The stale backends built in forked workers of this process, up to `jobs` at once."""
    from lowerd.project.project_store import store_for
    from lowerd.worker.local_builds import build_in_workers, import_build_modules, local_job

    batch.answer_up_to_date()
    if batch.stale:
        import_build_modules(store_for(batch.config) if batch.use_cache else None)
        work = {
            _label(batch, backend): local_job(
                batch.config_for(backend),
                batch.config_for(backend).targets[batch.target.name],
                batch.use_cache,
                (backend,),
            )
            for backend in batch.stale
        }
        progress = progress_printer()
        try:
            built = build_in_workers(work, jobs, progress)
        finally:
            if progress:
                progress.clear()
        batch.results.update({backend: built[_label(batch, backend)] for backend in batch.stale})
    return batch.outcome()


def _label(batch: CompareBatch, backend: str) -> str:
    """A build's name on the progress line (the daemon's says the same)."""
    return f"{batch.target.name} on {backend}"


def _via_daemon(batch: CompareBatch, start: bool) -> tuple[CompareResult, Outcome] | int | None:
    """The daemon's answer; an exit code when it could not give one; None: no daemon to use."""
    from lowerd.cli.daemon_client import final_via_daemon
    from lowerd.daemon.rpc_messages import CompareCall

    request = CompareCall(
        str(batch.config.path), batch.target.name, batch.backends, batch.use_cache
    )
    final = final_via_daemon(batch.config, request, start)
    if final is None or isinstance(final, int):
        return final
    if final.document is None:
        print(f"lowerd: {final.message}", file=sys.stderr)
        return exit_code(final.outcome)
    return decode(CompareResult, final.document), final.outcome


def _show(compared: CompareResult, outcome: Outcome, as_json: bool, seconds: float) -> int:
    from lowerd.cli.compare_table import format_compare

    for warning in compared.warnings:  # on stderr: --json's stdout stays one document
        sys.stderr.write(f"lowerd: {warning}\n")
    if as_json:
        json.dump(encode(compared), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_compare(compared, seconds))
    sys.stdout.flush()
    return exit_code(outcome)
