"""A disk that refuses lowerd's files, said at the config key whose folder it is.

A full disk (ENOSPC), a read-only one (EROFS), a folder where the .pte goes (EISDIR), a file where
`.lowerd` goes (ENOTDIR), a file size limit (EFBIG): each is the project's folder's doing, not
the model's. The build reports it as one OutputError at the `out_dir` line of the pyproject.toml
(its `[tool.lowerd]` line when out_dir is the default), naming the file and the system's words,
instead of a traceback blamed on the entry function.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from lowerd.cache.regular_file import read_regular_file
from lowerd.project.config import ProjectConfig
from lowerd.project.config_reader import LOWERD, KeyReader
from lowerd.project.errors import OutputError


@contextlib.contextmanager
def writing_in_out_dir(
    config: ProjectConfig, path: Path, what: str = "", verb: str = "write"
) -> Iterator[None]:
    """An OSError of the block (which does `verb` to `path`, `what` it is) raised as the
    out_dir's error."""
    try:
        yield
    except OSError as error:
        raise out_dir_error(config, path, error, what, verb) from None


def out_dir_error(
    config: ProjectConfig, path: Path, error: OSError, what: str = "", verb: str = "write"
) -> OutputError:
    reason = error.strerror or str(error)
    subject = f"{what} {_shown(config, path)}" if what else _shown(config, path)
    message = f"out_dir: cannot {verb} {subject}: {reason}"
    return OutputError(message, config.path, key_line(config, "out_dir"))


def record_written(
    config: ProjectConfig, target: str, record: Path, write: Callable[[], None]
) -> tuple[str, ...]:
    """Run `write`, which writes (or removes) the target's build record at `record`; the one
    line saying what the disk refused (a folder in its place, a file where `.lowerd` goes), if
    it did. The build stands, its .pte written: only the next build's shortcut is lost, as
    with no record, so the target does not fail for it."""
    try:
        with writing_in_out_dir(config, record, "build record"):
            write()
    except OutputError as error:
        line = error.location.line
        where = f"{config.path.name}:{line}" if line else config.path.name
        return (f"{where}: {error.message}; {target}'s .pte is written, its next build rebuilds",)
    return ()


def still_there(config: ProjectConfig, outputs: Sequence[Path]) -> str:
    """What a failed target's message adds when the disk kept its earlier outputs (a read-only
    out_dir): they stay, and no longer match the sources."""
    if not outputs:
        return ""
    shown = ", ".join(_shown(config, path) for path in outputs)
    return f" (the earlier {shown} could not be removed, and no longer matches the sources)"


def key_line(config: ProjectConfig, key: str) -> int | None:
    """The line of a [tool.lowerd] key in the config, else of the [tool.lowerd] table."""
    try:
        text = read_regular_file(config.path).decode("utf-8")
    except (OSError, UnicodeDecodeError):  # changed since it was loaded: no line to point at
        return None
    return KeyReader(config.path, text).line((*LOWERD, key))


def _shown(config: ProjectConfig, path: Path) -> str:
    """The path relative to the project root when inside it, as reports name files."""
    try:
        return str(path.relative_to(config.root))
    except ValueError:
        return str(path)
