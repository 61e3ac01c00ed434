"""Map ExecuTorch nodes and Python exceptions back to the user's own source lines.

A frame is the user's when its file lies under the project root and outside installed packages;
library frames (torch.nn, executorch) are skipped so that a warning lands on the user's call.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_NOT_USER_PARTS = {"site-packages", "dist-packages", ".venv", "venv", "__pycache__"}


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int


class UserFiles:
    """Decides which files are the user's, and how to name them in a report."""

    def __init__(self, root: Path):
        self.given_root = root
        self.root = root.resolve()

    def owns(self, file: str | Path) -> bool:
        path = Path(file)
        if not path.is_absolute():
            return False
        try:
            relative = path.resolve().relative_to(self.root)
        except ValueError:
            return False
        return not (_NOT_USER_PARTS & set(relative.parts))

    def display(self, file: str | Path) -> str:
        """Relative to the project root when inside it, so reports read the same on any machine."""
        path = Path(file).resolve()
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def innermost_in_stack_trace(self, stack_trace: str | None) -> SourceLine | None:
        """The last user frame of a node's meta["stack_trace"] (innermost is printed last)."""
        if not stack_trace:
            return None
        frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(stack_trace)]
        return self._innermost(frames)

    def innermost_in_exception(self, error: BaseException) -> SourceLine | None:
        """The innermost user frame of an exception, its causes, or the frames its message cites.

        torch.export's errors often re-raise from deep inside tracing; the user's line is then
        only named in the chained exception or in the message text.
        """
        for exc in _chain(error):
            frames = [(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
            found = self._innermost(frames)
            if found:
                return found
        for exc in _chain(error):
            found = self.innermost_in_stack_trace(str(exc))
            if found:
                return found
        return None

    def _innermost(self, frames: list[tuple[str, int | None]]) -> SourceLine | None:
        for file, line in reversed(frames):
            if line and self.owns(file):
                return SourceLine(str(Path(file).resolve()), line)
        return None


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
