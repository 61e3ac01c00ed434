"""Issue 12 §6: a build's stderr holds lowerd's lines and the user's, never library chatter.

torch's `W…` pytree line, copyreg's FutureWarnings and torchao's "Failed to load …so" records
showed on every build; they are DEBUG records now, shown with --verbose. Two in-process builds of
examples/ (the daemon's workers write to its log, not to the client): the whole demo project
quiet, with a model that prints and warns as a user's would (conftest.py's examples_build, whose
document tests/test_cli.py reads); one target with --verbose.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from lowerd.project.library_output import LibraryHandler, log_level

from helpers import EXAMPLES, USER_OUTPUT, SharedBuild, lowerd
from testkit.projects import copy_project


def test_build_stderr_holds_only_lowerd_and_user_lines(examples_build: SharedBuild) -> None:
    # The user's own output, from their model's file (helpers.USER_OUTPUT): it must still show.
    assert USER_OUTPUT in (examples_build.root / "models" / "cnn.py").read_text()
    run = examples_build.run
    assert run.returncode == 0, run.log
    assert "--no-daemon" in run.args, run.log
    user = [line for line in run.stderr.splitlines() if "cnn: " in line]
    assert "cnn: made by the user" in user, run.log
    assert any("UserWarning: cnn: the user's own warning" in line for line in user), run.log
    others = [line for line in run.stderr.splitlines() if not _lowerd_or_user(line)]
    assert not others, run.log


def test_verbose_shows_library_lines(tmp_path: Path) -> None:
    project = copy_project(EXAMPLES, tmp_path / "project")
    run = lowerd(project, tmp_path / "cache", "build", "--no-daemon", "--verbose", "cnn")
    assert run.returncode == 0, run.log
    # torch's pytree record, from its own logger, now one of lowerd's DEBUG lines.
    assert "DEBUG torch.utils._pytree: " in run.stderr, run.log


def _lowerd_or_user(line: str) -> bool:
    """lowerd's own lines ("lowerd: …"), and the user's print and warning (two lines: the
    warning's source line follows it)."""
    return line.startswith("lowerd: ") or "cnn: " in line or "_warnings.warn(" in line


def test_an_unknown_log_level_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOWERD_LOG_LEVEL=verbose is no level: the default holds, nothing fails to start."""
    monkeypatch.setenv("LOWERD_LOG_LEVEL", "verbose")
    monkeypatch.delenv("LOWERD_DAEMON_LOG_LEVEL", raising=False)
    assert log_level("WARNING", "LOWERD_DAEMON_LOG_LEVEL", "LOWERD_LOG_LEVEL") == logging.WARNING
    monkeypatch.setenv("LOWERD_DAEMON_LOG_LEVEL", "debug")
    assert log_level("WARNING", "LOWERD_DAEMON_LOG_LEVEL", "LOWERD_LOG_LEVEL") == logging.DEBUG


def test_a_library_error_record_is_kept_for_debugging_only() -> None:
    """A library's ERROR record (torchao logs failures to load its kernels at that level) goes to
    lowerd's handlers at DEBUG with its level in the text: the default output stays lowerd's."""
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep, root = Keep(level=logging.DEBUG), logging.getLogger()
    root.addHandler(keep)
    try:
        library = logging.getLogger("torchao.kernel")
        LibraryHandler().handle(
            library.makeRecord(
                "torchao.kernel", logging.ERROR, "f", 1, "Failed to load x.so", (), None
            )
        )
    finally:
        root.removeHandler(keep)
    assert [(r.levelno, r.getMessage()) for r in seen] == [
        (logging.DEBUG, "(ERROR) Failed to load x.so")
    ]
