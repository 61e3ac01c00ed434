"""The exit codes of `lowerd`: every target built; a target failed (the others still build);
usage or config. Layers below the CLI say which outcome a build had (project/batch.py Outcome)."""

from __future__ import annotations

from lowerd.project.batch import Outcome

EXIT_OK, EXIT_TARGET_FAILED, EXIT_USAGE = 0, 1, 2

_BY_OUTCOME: dict[Outcome, int] = {
    "ok": EXIT_OK,
    "target_failed": EXIT_TARGET_FAILED,
    "usage": EXIT_USAGE,
}


def exit_code(outcome: Outcome) -> int:
    return _BY_OUTCOME[outcome]
