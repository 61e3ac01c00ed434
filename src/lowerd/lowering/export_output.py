"""What torch writes to stderr while exporting, held until the export's outcome is known.

torch logs through its own loggers, whose stream handlers write to stderr past the root logger
(and so past $LOWERD_LOG_LEVEL), and when an export fails it prints the partial graph it traced.
Next to lowerd's file:line message that is noise: after a failure both go to lowerd's log at
DEBUG (`LOWERD_LOG_LEVEL=DEBUG` shows them). After a success they go to the handlers they had
(lowerd's, library_output.py), and whatever else the export printed to stderr (the user's forward,
warnings) is let through.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator

from lowerd.project.library_output import LibraryHandler

_log = logging.getLogger(__name__)


@contextlib.contextmanager
def export_output_held() -> Iterator[None]:
    held = _HeldOutput()
    error: BaseException | None = None
    try:
        with held.installed():
            yield
    except BaseException as raised:
        error = raised
        raise
    finally:
        held.release(error)


class _Holder(logging.Handler):
    """Stands in for a torch logger's stream handlers, keeping each record for them."""

    def __init__(self, held: _HeldOutput, handlers: list[logging.Handler]):
        super().__init__()
        self.held = held
        self.handlers = handlers

    def emit(self, record: logging.LogRecord) -> None:
        self.held.records.append((record, self.handlers))


class _HeldOutput:
    def __init__(self) -> None:
        self.records: list[tuple[logging.LogRecord, list[logging.Handler]]] = []
        self.stderr = io.StringIO()

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        swapped = {}
        for logger in _torch_loggers():
            streams = [h for h in logger.handlers if _is_stream(h)]
            if streams:
                swapped[logger] = logger.handlers
                others = [h for h in logger.handlers if not _is_stream(h)]
                logger.handlers = [*others, _Holder(self, streams)]
        try:
            with contextlib.redirect_stderr(self.stderr):
                yield
        finally:
            for logger, handlers in swapped.items():
                logger.handlers = handlers

    def release(self, error: BaseException | None) -> None:
        text = self.stderr.getvalue()
        graph = getattr(error, "partial_fx_graph", None)
        if graph:  # torch.export's wrappers print it, once per wrapper, with print()
            text = text.replace(f"{graph}\n", "")
            message = "the graph torch.export traced before it failed:\n%s"
            _at_debug(
                _log.makeRecord(_log.name, logging.DEBUG, __file__, 0, message, (graph,), None)
            )
        if text:
            sys.stderr.write(text)
            sys.stderr.flush()
        for record, handlers in self.records:
            if error is None:
                _handle(record, handlers)
            else:  # lowerd reports the failure at its line; torch's account is for debugging
                _at_debug(record)


def _torch_loggers() -> list[logging.Logger]:
    loggers = logging.Logger.manager.loggerDict.items()
    return [
        logger
        for name, logger in loggers
        if isinstance(logger, logging.Logger) and (name == "torch" or name.startswith("torch."))
    ]


def _is_stream(handler: logging.Handler) -> bool:
    """torch's console handlers, or lowerd's in their place (library_output.py); not its trace
    handler (files, with $TORCH_TRACE)."""
    if isinstance(handler, LibraryHandler):
        return True
    stream = getattr(handler, "stream", None)
    return stream is not None and stream in (sys.stderr, sys.__stderr__)


def _at_debug(record: logging.LogRecord) -> None:
    """To the root logger's handlers, which show DEBUG records when $LOWERD_LOG_LEVEL says so
    (the loggers' own levels would drop them before any handler saw them)."""
    record.levelno, record.levelname = logging.DEBUG, "DEBUG"
    logging.getLogger().handle(record)


def _handle(record: logging.LogRecord, handlers: list[logging.Handler]) -> None:
    for handler in handlers:
        if record.levelno >= handler.level:
            handler.handle(record)
