"""What `lowerd build` prints, whether it built in-process or through the daemon: a progress line
on a terminal while it works, then the JSON document or the readable report."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lowerd.cli.report_table import ReportView, format_report


@dataclass(frozen=True)
class BuildAsk:
    """What `lowerd build` was asked, whichever executor answers it (in-process, the daemon, Ray).

    `jobs` is None when --jobs was not given: each executor has its own default."""

    config_path: str | None
    target_names: tuple[str, ...]
    as_json: bool
    use_cache: bool
    jobs: int | None
    view: ReportView | None = None
    started: float = 0.0  # perf_counter() when asked: the report's total time counts from it
    # Who takes the build's document instead of printing it (`lowerd oplist`, `lowerd check`).
    answer: Callable[[dict[str, Any]], None] | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BuildAsk:
        view = ReportView(all_ops=args.all_ops, modules=args.modules, verbose=args.verbose)
        return cls(
            args.config,
            tuple(args.targets),
            args.json,
            not args.no_cache,
            args.jobs,
            view,
            time.perf_counter(),
        )

    def print_outcome(self, document: dict[str, Any]) -> None:
        """The build's JSON document or readable report, and its warnings."""
        if self.answer is not None:
            self.answer(document)
            return
        seconds = time.perf_counter() - self.started
        print_outcome(document, self.as_json, seconds, self.view)


def print_outcome(
    document: dict[str, Any], as_json: bool, seconds: float, view: ReportView | None = None
) -> None:
    # On stderr in both forms: a cache that could not be used is worth a line, not a failure.
    for warning in document.get("warnings", []):
        sys.stderr.write(f"lowerd: {warning}\n")
    if as_json:
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_report(document, seconds, view))
    sys.stdout.flush()


def progress_printer() -> ProgressLine | None:
    """A progress line on stderr when it is a terminal; None (print nothing) otherwise."""
    return ProgressLine() if sys.stderr.isatty() else None


class ProgressLine:
    """One line, rewritten in place: `[target] stage detail`."""

    def __call__(self, stage: str, target: str, detail: str | None) -> None:
        text = f"[{target}] {stage}" + (f" {detail}" if detail else "")
        sys.stderr.write(f"\r\033[K{text[:120]}")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()
