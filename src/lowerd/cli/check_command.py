"""`lowerd check [--update]`: the targets' facts against the committed baseline (CI's gate).

The targets are built as `lowerd build` builds them (up-to-date ones answered from their
records); their facts (project/baseline.py) are compared with lowerd.baseline.toml beside the
pyproject.toml. Exit 0: nothing regressed; 1: a fact regressed past its band, a target failed
to build or would not load on its runtime; 2: no baseline yet, or a usage or config error.
`--update` writes the facts as the new baseline (targets that failed keep their old facts).
`--json` prints the comparison as a document instead of the table (project/baseline.py
CheckDocument), with the same exit code.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Container, Sequence
from pathlib import Path

from lowerd.cache.atomic import write_atomic
from lowerd.cli.built_targets import build_document
from lowerd.cli.exit_codes import EXIT_OK, EXIT_TARGET_FAILED, EXIT_USAGE
from lowerd.project.baseline import (
    BASELINE_FILE,
    Change,
    CheckDocument,
    Facts,
    baseline_path,
    baseline_text,
    compare,
    facts_of,
    read_baseline,
    shown_fact,
)
from lowerd.project.config import choose_config, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode


def run_check(
    config_path: str | None, target_names: Sequence[str], update: bool, as_json: bool = False
) -> int:
    config = load_config(choose_config(config_path))
    path = baseline_path(config.path)
    if not update and not path.exists():  # anything else there is read, and refused at its line
        print(
            f"lowerd: no {BASELINE_FILE} beside {config.path.name}: `lowerd check --update` "
            "writes one from this build",
            file=sys.stderr,
        )
        return EXIT_USAGE
    # Read (and refused at its line) before any build: --update keeps the facts of targets not
    # built now, and a broken file must not cost a build first.
    baseline = read_baseline(path) if path.exists() else {}
    document, exit_code = build_document(str(config.path), target_names)
    if document is None:
        return exit_code
    results = [decode(TargetResult, target) for target in document["targets"]]
    now = {result.name: facts_of(result) for result in results if result.ok}
    broken = [_broken(result) for result in results if not result.ok or not result.loads]
    if update:
        _update(path, baseline, config.targets, now)
        for line in broken:
            print(f"lowerd: {line}", file=sys.stderr)
        return EXIT_TARGET_FAILED if broken else EXIT_OK
    changes = compare(baseline, now)
    checked = CheckDocument.of(path, len(now), changes, broken)
    if as_json:
        json.dump(encode(checked), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(check_report(changes, broken, now))
    return EXIT_OK if checked.passed else EXIT_TARGET_FAILED


def _update(
    path: Path, earlier: dict[str, Facts], targets: Container[str], now: dict[str, Facts]
) -> None:
    """The baseline with the facts of the targets built now; a target not built now keeps its
    facts, one no longer in the config loses them."""
    kept = {name: facts for name, facts in earlier.items() if name in targets}
    try:
        write_atomic(path, baseline_text({**kept, **now}).encode("utf-8"), mode=0o644)
    except OSError as error:  # a read-only or full disk, a folder that appeared since
        raise ConfigError(f"cannot write {path.name}: {error.strerror or error}", path) from None
    print(f"lowerd: wrote the facts of {len(now)} targets to {path.name}")


def _broken(result: TargetResult) -> str:
    if result.ok:  # built, but its runtime would refuse it
        runtime = result.runtime.runtime if result.runtime else "its runtime"
        return f"{result.name}: does not load on {runtime}"
    error = result.error
    where = f"{error.file}:{error.line}: " if error and error.file and error.line else ""
    return f"{result.name}: failed: {where}{error.message if error else 'no result'}"


def check_report(changes: Sequence[Change], broken: Sequence[str], now: dict[str, Facts]) -> str:
    """The table of what moved (regressions first), the broken targets, and the verdict."""
    regressions = [change for change in changes if change.regression]
    rows = [("target", "fact", "baseline", "now", "")]
    for change in sorted(changes, key=lambda change: not change.regression):
        rows.append(
            (
                change.target,
                change.fact,
                shown_fact(change.baseline),
                shown_fact(change.now),
                _verdict(change),
            )
        )
    lines = []
    if len(rows) > 1:
        widths = [max(len(row[column]) for row in rows) for column in range(5)]
        lines += [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
    lines += broken
    verdict = f"{len(regressions)} regression{'s' if len(regressions) != 1 else ''}"
    if broken:
        verdict += f", {len(broken)} target{'s' if len(broken) != 1 else ''} broken"
    lines.append(f"lowerd check: {verdict} in {len(now)} targets against {BASELINE_FILE}")
    return "\n".join(lines) + "\n"


def _verdict(change: Change) -> str:
    if change.regression:
        return "REGRESSION"
    if change.baseline is None:
        return "new (--update adds it)"
    if change.now is None:
        return "not measured now"
    return "better (--update keeps it)"
