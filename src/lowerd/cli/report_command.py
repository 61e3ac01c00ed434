"""`lowerd report [TARGET ...]`: the last build's report, from the build records, without
building: as text (what `lowerd build` printed), as the `--json` document, or as one standalone
HTML page (`--html FILE`, project/report_page.py). Never imports torch: it reads msgpack records.

A target with no record (never built, or its last build failed) is named on stderr and in the
page, and makes the exit code 1; a record whose sources changed since is shown, marked out of
date (the first reason, as `lowerd build` would find it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lowerd.cache.atomic import write_atomic
from lowerd.cli.build_output import print_outcome
from lowerd.cli.exit_codes import EXIT_OK, EXIT_TARGET_FAILED, EXIT_USAGE
from lowerd.cli.report_table import ReportView
from lowerd.project.build_state import read_state, why_out_of_date
from lowerd.project.config import (
    ProjectConfig,
    choose_config,
    load_config,
    select_targets,
)
from lowerd.project.report_page import TargetPage, render_page
from lowerd.project.wire import encode


def run_report(
    config_path: str | None,
    target_names: Sequence[str],
    html: str | None,
    as_json: bool,
    view: ReportView | None = None,
) -> int:
    started = time.perf_counter()
    config = load_config(choose_config(config_path))
    pages = [target_page(config, target.name) for target in select_targets(config, target_names)]
    missing = [page for page in pages if page.result is None]
    for absent in missing:
        said = (
            absent.refused
            or f"{absent.name}: no build record (never built, or its last build failed)"
        )
        print(f"lowerd: {said}", file=sys.stderr)
    if html is not None:
        path = Path(html)
        page = render_page(config.root.name, config.root, pages)
        try:
            write_atomic(path, page.encode(), mode=0o644)
        except OSError as error:  # a missing folder, a folder in its place, a full disk
            why = error.strerror or error
            print(f"lowerd: --html {path}: cannot write: {why}", file=sys.stderr)
            return EXIT_USAGE
        print(f"wrote {path}")
    else:
        results = [page.result for page in pages if page.result is not None]
        document = {
            "config": str(config.path),
            "targets": [encode(result) for result in results],
            "warnings": [f"{page.name}: out of date: {page.stale}" for page in pages if page.stale],
        }
        print_outcome(document, as_json, time.perf_counter() - started, view)
    return EXIT_TARGET_FAILED if missing else EXIT_OK


def target_page(config: ProjectConfig, name: str) -> TargetPage:
    target = config.targets[name]
    read = read_state(config, target)
    if read.state is None:
        return TargetPage(name, None, refused=read.refusal(name))
    recorded = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(read.mtime))
    stale = why_out_of_date(config, target, read.state)
    return TargetPage(name, read.state.report, stale, recorded)
