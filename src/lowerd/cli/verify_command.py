"""`lowerd verify`: build the targets as `lowerd build` does, each verifying on this host's runtime.

The targets named (all without names) verify whatever their `verify` key says. A target whose
last build verified with the same settings and is still up to date is answered from its record;
the others build in forks of this process (worker/local_builds.py), whose verification stage runs
the runtime in a child of their runtime zygote (lowering/runtime_zygote.py). A program verified
before is not run again (the verification memo), unless `--bench` asks for its latency anew.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from lowerd.cli.build_output import progress_printer
from lowerd.cli.exit_codes import EXIT_TARGET_FAILED, exit_code
from lowerd.cli.verify_table import format_verification
from lowerd.project.batch import Batch
from lowerd.project.config import choose_config, load_config, select_targets
from lowerd.project.project_store import store_for
from lowerd.worker.local_builds import build_in_workers, import_build_modules, local_job


def run_verify(args: argparse.Namespace) -> int:
    config = load_config(choose_config(args.config)).with_verify(args.targets)
    batch = Batch(config, select_targets(config, args.targets), use_cache=True)
    if not args.bench:
        batch.answer_up_to_date()
    if batch.stale:
        import_build_modules(store_for(batch.config))
        progress = progress_printer()
        try:
            work = {
                t.name: replace(local_job(config, t, True), verify=True, bench=args.bench)
                for t in batch.stale
            }
            batch.results.update(build_in_workers(work, 1, progress))
        finally:
            if progress:
                progress.clear()
    document, outcome = batch.outcome()
    for warning in document.get("warnings", []):
        sys.stderr.write(f"lowerd: {warning}\n")
    if args.json:
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_verification(document))
    verified = all(result.verification is not None for result in batch.results.values())
    return exit_code(outcome) if verified else EXIT_TARGET_FAILED
