"""Map ExecuTorch nodes and Python exceptions back to the user's own source lines.

A frame is the user's when its file lies under the project root and outside installed packages;
library frames (torch.nn, executorch) are skipped so that a warning lands on the user's call.
"""

from __future__ import annotations

import inspect
import re
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lowerd.project.report_model import Frame

# A frame's line as traceback prints it. The file name is printed as it is, quotes and all (a
# model file named `a"b.py`): it runs to the first `", line N` on its line, not to the first `"`.
_FRAME = re.compile(r'File "(?P<file>[^\n]+?)", line (?P<line>\d+)(?:, in (?P<function>\S+))?')
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
        # Resolved once per file: a report asks about the same few files for every node, and
        # resolving a path is a syscall per component (most of a Llama report's time). A build
        # is short: the files do not move under it.
        self._resolved: dict[str | Path, Path] = {}

    def _resolve(self, file: str | Path) -> Path:
        if file not in self._resolved:
            self._resolved[file] = Path(file).resolve()
        return self._resolved[file]

    def owns(self, file: str | Path) -> bool:
        if not Path(file).is_absolute():
            return False
        try:
            relative = self._resolve(file).relative_to(self.root)
        except ValueError:
            return False
        return not (_NOT_USER_PARTS & set(relative.parts))

    def display(self, file: str | Path) -> str:
        """Relative to the project root when inside it, so reports read the same on any machine."""
        path = self._resolve(file)
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

    def innermost_library_frame(self, stack_trace: str | None) -> Frame | None:
        """The innermost frame of a node's stack trace when it is not the user's: the library
        line that made the op (transformers' LlamaRMSNorm.forward), with its function.

        Frames of generated code (`<eval_with_key>.77`: what export inlines a region such as
        an autocast block from) name no file to open, so the innermost real file is taken.
        """
        for match in reversed(list(_FRAME.finditer(stack_trace or ""))):
            file = match["file"]
            if file.startswith("<"):
                continue
            if self.owns(file):
                return None  # the user's own line is the op's origin: reported as file/line
            return Frame(self.display(file), int(match["line"]), match["function"])
        return None

    def library_forward(self, qualified_class: str) -> Frame | None:
        """The `def forward` line of a library's module class (`pkg.mod.Class`), for ops whose
        stack trace holds generated code only: their module is then all that is known of them.
        Never imports anything: a class the build did not load is not looked for."""
        module_name, _, class_name = qualified_class.rpartition(".")
        forward = getattr(getattr(sys.modules.get(module_name), class_name, None), "forward", None)
        if forward is None:
            return None
        try:
            forward = inspect.unwrap(forward)  # transformers decorates some (rotary embeddings)
            file = inspect.getsourcefile(forward)
            _, line = inspect.getsourcelines(forward)
        except (OSError, TypeError, ValueError):
            return None
        if not file or self.owns(file):
            return None
        return Frame(self.display(file), line, f"{class_name}.forward")

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

    def _innermost(self, frames: Sequence[tuple[str, int | None]]) -> SourceLine | None:
        for file, line in reversed(frames):
            if line and self.owns(file):
                return SourceLine(str(self._resolve(file)), line)
        return None


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
