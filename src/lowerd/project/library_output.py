"""Libraries' log records and warnings, kept out of lowerd's output unless one is debugging.

A build of a few models printed dozens of lines that are not lowerd's and ask nothing of the user:
torch's `W…` log lines (its loggers carry their own stderr handlers, past the root logger),
torchao's "Failed to load …so" records, FutureWarnings raised inside torch's pytree code. Here
each becomes a DEBUG record handed to the root logger's handlers, which are lowerd's: the CLI's
stderr at $LOWERD_LOG_LEVEL (`--verbose`: DEBUG), the daemon's log at its level. A library's
ERROR records too: what fails a build reaches the user as lowerd's own error at their line, and the
library's record, its level kept in the text, is there for whoever debugs.

What is the user's stays as it was: prints, and warnings whose file is not a library's (the
user's code, or a library warning with a stacklevel that points at it). Torch-free.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import sysconfig
import warnings
from typing import Any, TextIO

# The top-level loggers of the libraries a build runs; their children propagate to these.
LIBRARIES = ("torch", "torchao", "executorch")

_warnings_log = logging.getLogger("py.warnings")


class LibraryHandler(logging.Handler):
    """Stands in for a library logger's console handler."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno > logging.DEBUG:
            record.msg = f"({record.levelname}) {record.msg}"
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        # root.handle(), not a logger's: the root's own level (WARNING) would drop a DEBUG record
        # before the handlers, whose levels are the ones lowerd sets.
        logging.getLogger().handle(record)


_HANDLER = LibraryHandler()


def route_library_logs(libraries: tuple[str, ...] = LIBRARIES) -> None:
    """Swap the libraries' console handlers for lowerd's. Call after `import torch` (which
    installs torch's handlers) and before anything that may log: torchao's import does. The
    Ray client passes ("ray",): Ray's loggers are routed only where lowerd drives Ray."""
    for name in libraries:
        logging.getLogger(name)  # exists from now on, so that the loop below reaches it
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or not _is_library_logger(name, libraries):
            continue
        consoles = [h for h in logger.handlers if _is_console(h)]
        for handler in consoles:
            logger.removeHandler(handler)
        if (consoles or name in libraries) and _HANDLER not in logger.handlers:
            logger.addHandler(_HANDLER)
            logger.propagate = False  # else the root's handlers would see a record twice


def quiet_library_logs() -> None:
    """Backends chat on the root logger (Vulkan even sets it to INFO); lowerd reports failures
    itself, so library records below $LOWERD_LOG_LEVEL (default ERROR) are not shown.

    A root handler installed first also turns the libraries' own basicConfig() calls into no-ops.
    Warnings raised in libraries become DEBUG records for it (capture_library_warnings).
    """
    capture_library_warnings()
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(log_level("ERROR", "LOWERD_LOG_LEVEL"))
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)


def log_level(default: str, *variables: str) -> int:
    """The level named by the first of these environment variables that is set, or default: a
    name logging does not know (LOWERD_LOG_LEVEL=verbose) falls back, never fails a start."""
    name = next((os.environ[v] for v in variables if os.environ.get(v)), default)
    level = logging.getLevelName(name.strip().upper())
    return level if isinstance(level, int) else logging.getLevelName(default)


def capture_library_warnings() -> None:
    """Warnings raised in a library's file go to the log at DEBUG; the others show as usual.
    Installed once per process, inherited by its forks."""
    if getattr(warnings.showwarning, "lowerd_captures", False):
        return
    shown = warnings.showwarning

    def showwarning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if file is not None or not is_library_file(filename):
            shown(message, category, filename, lineno, file, line)
            return
        text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
        logging.getLogger().handle(
            _warnings_log.makeRecord(
                _warnings_log.name, logging.DEBUG, filename, lineno, "%s", (text,), None
            )
        )

    showwarning.lowerd_captures = True  # type: ignore[attr-defined]
    warnings.showwarning = showwarning


def is_library_file(filename: str) -> bool:
    """Python's own modules and installed packages (torch, copyreg); `<frozen …>` too."""
    if filename.startswith("<"):
        return True
    path = os.path.realpath(filename)
    return any(path.startswith(root + os.sep) for root in _library_roots())


@functools.cache
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    keys = ("stdlib", "platstdlib", "purelib", "platlib")
    return tuple({os.path.realpath(paths[key]) for key in keys if key in paths})


def _is_library_logger(name: str, libraries: tuple[str, ...]) -> bool:
    return any(name == top or name.startswith(f"{top}.") for top in libraries)


def _is_console(handler: Any) -> bool:
    """torch's stderr handlers (StreamHandler() holds the stderr of its creation); not a
    FileHandler (its trace, with $TORCH_TRACE), which writes where it was asked to."""
    if isinstance(handler, logging.FileHandler):
        return False
    stream = getattr(handler, "stream", None)
    return stream is not None and stream in (sys.stderr, sys.__stderr__)
