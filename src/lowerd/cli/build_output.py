"""What `lowerd build` prints, whether it built in-process or through the daemon: a progress line
on a terminal while it works, then the JSON document or the readable report."""

from __future__ import annotations

import json
import sys
from typing import Any

from lowerd.cli.report_table import ReportView, format_report


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
