"""The user's files a build read: every module it imported and every file it opened.

Modules come from sys.modules after the entry ran; data files (weights a `make()` loads, a
tokenizer's vocabulary) from the interpreter's `open` audit events while the entry and export run.
Both are filtered to the project's own files, so a change to any of them marks the target stale.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lowerd.project.source_map import UserFiles

_recording: list[set[str]] = []  # the open-event sinks of the recorders now running
_hook_installed = False


def _on_audit_event(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _recording:
        return
    path, mode = args[0], args[1]
    if isinstance(path, str) and (mode is None or not set(str(mode)) & set("wax+")):
        _recording[-1].add(os.path.abspath(path))  # relative to the cwd of the moment


class InputRecorder:
    def __init__(self, user_files: UserFiles, exclude: Path):
        self.user_files = user_files
        # Plain prefixes of the project root, as written and resolved: thousands of torch modules
        # are ruled out by a string compare before any of them is resolved against the disk.
        self.prefixes = tuple({str(user_files.given_root), str(user_files.root)})
        self.exclude = exclude.resolve()
        self.opened: set[str] = set()

    @contextmanager
    def recording(self) -> Iterator[None]:
        global _hook_installed
        if not _hook_installed:  # audit hooks cannot be removed: install one, gate it
            sys.addaudithook(_on_audit_event)
            _hook_installed = True
        _recording.append(self.opened)
        try:
            yield
        finally:
            _recording.remove(self.opened)

    def files(self) -> set[Path]:
        modules = {getattr(m, "__file__", None) for m in list(sys.modules.values())}
        candidates = {
            Path(f) for f in modules | self.opened if isinstance(f, str) and self._near_root(f)
        }
        return {
            path.resolve()
            for path in candidates
            if self.user_files.owns(path) and not path.resolve().is_relative_to(self.exclude)
        }

    def _near_root(self, file: str) -> bool:
        # A symlinked module resolves elsewhere but is imported by a path under the root.
        return file.startswith(self.prefixes)
