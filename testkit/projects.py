"""Projects as the tests and the benches handle them: copied without their outputs, their files
replaced in one step as an editor saves them."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# What a copy leaves out: lowerd's outputs (out_dir = "build" in every project of the repo) and
# bytecode, so that nothing a run writes lands in the repo and no copy starts warm.
OUTPUTS = ("build", "__pycache__")


def copy_project(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns(*OUTPUTS))
    return destination


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path`'s content in one step: a reader (a build worker, the file watcher) sees the
    old text or the new one, never a truncated file."""
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
