"""Targets built as `lowerd build` builds them, for a command that reads their results
(`lowerd oplist`, `lowerd check`): through the project's running daemon, else in this process;
up-to-date targets answered from their records. Only the progress line is printed."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from lowerd.cli.build_output import BuildAsk


def build_document(
    config_path: str | None, target_names: Sequence[str]
) -> tuple[dict[str, Any] | None, int]:
    """The build's JSON document (None when no build answered) and its exit code."""
    from lowerd.cli.daemon_client import build_via_daemon

    documents: list[dict[str, Any]] = []
    ask = BuildAsk(
        config_path,
        tuple(target_names),
        as_json=True,
        use_cache=True,
        jobs=None,
        started=time.perf_counter(),
        answer=documents.append,
    )
    exit_code = build_via_daemon(ask, start=False)
    if exit_code is None:
        from lowerd.cli.build_command import run_build

        exit_code = run_build(ask)
    return (documents[0] if documents else None), exit_code
