"""Where a build's failure is reported: the user's line the failure passed through, else the entry.

A torch or ExecuTorch error is a traceback through library code the user never wrote; the line
that matters is the innermost frame in the user's files (their module's forward, their
transform pass). When the failure passed through none, the entry function is the user's nearest
line; before the entry is loaded, there is no line to give.
"""

from __future__ import annotations

import errno
import re
import sys
import tempfile
from dataclasses import dataclass

from lowerd.project.errors import LowerdError
from lowerd.project.source_map import UserFiles

# A disk that refuses a file: full, over quota, read-only, past the file size limit.
_DISK_REFUSALS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})

# Python frames torch.export (non-strict, torch 2.13) runs per level of a chain of modules: a
# chain past ~110 levels passes the default recursion limit of 1000 (measured).
_FRAMES_PER_LEVEL = 8

# Advice torch appends to its errors about its own debugging switches: noise next to a file:line.
_TORCH_HINT = re.compile(
    r"^(For more|For extended|If you suspect|For C\+\+|The error above occurred|Caused by:"
    r"|The following call raised this error)"
)


@dataclass(frozen=True)
class Blame:
    """Makes the LowerdError of a failure, at the place to blame. Called like quantize.py's
    `Blame`: `raise blame(LoweringError, error, "ExecuTorch lowering failed") from error`."""

    user_files: UserFiles
    # The entry function's definition: where a failure that passed through no user frame is
    # blamed (None until the entry is loaded).
    file: str | None = None
    line: int | None = None
    # How deep the entry's modules nest (module_tree.nesting), once it is loaded: a recursion
    # error of a model that deep is its nesting's, said at the entry that built it.
    nesting: int = 0

    def __call__(self, kind: type[LowerdError], error: Exception, doing: str) -> LowerdError:
        limit = sys.getrecursionlimit()
        if isinstance(error, RecursionError) and self.nesting * _FRAMES_PER_LEVEL >= limit:
            return kind(
                f"{doing}: the model is nested {self.nesting} modules deep, and following it "
                f"one call per level passed Python's recursion limit ({limit}): nest it less "
                "deep (its layers in an nn.ModuleList, run in a loop)",
                self.file,
                self.line,
            )
        message = f"{doing}: {summary(error)}"
        source = self.user_files.innermost_in_exception(error)
        if source is not None:
            return kind(message, source.file, source.line)
        if isinstance(error, OSError) and error.errno in _DISK_REFUSALS:
            return kind(f"{doing}: {temp_files_refused(error)}")  # the disk's doing, no line's
        return kind(message, self.file, self.line)


def temp_files_refused(error: OSError) -> str:
    """A disk refusing a file torch or ExecuTorch writes outside the project: their temporary
    files (flatc's, the ETRecord's) go to the temp folder."""
    which = f"the temporary file {error.filename}" if error.filename else "a temporary file"
    return (
        f"the disk refused {which} in {tempfile.gettempdir()}: {error.strerror or error} "
        "(TMPDIR chooses the folder)"
    )


def summary(error: Exception, max_lines: int = 8) -> str:
    """The error's type and first lines, without torch's debugging advice."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    kept = []
    for line in lines:
        if _TORCH_HINT.match(line):
            break  # the hints come last; what follows them is the call site we already report
        kept.append(line)
    text = "\n".join(kept[:max_lines])
    if len(kept) > max_lines:
        text += f"\n... ({len(kept) - max_lines} more lines)"
    return f"{type(error).__name__}: {text}"
