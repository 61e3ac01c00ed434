"""The user's files a build read: every module it imported and every file it opened.

Modules come from sys.modules after the entry ran; data files (weights a `make()` loads, a
tokenizer's vocabulary) from the interpreter's `open` audit events while the entry and export run.
Both are filtered to the project's own files, so a change to any of them marks the target stale.

An open of a project file is also told apart by who opened it: the import system (a module's
source or its .pyc) and `linecache` on behalf of a library (a traceback's or a node's stack
trace's line, lowerd's `inspect` of the entry's site) read it as code, whose meaning is its
tokens; anything else (the entry's own `open`, numpy, torch.load, the user's code inspecting
its own source) reads it as data, whose every byte may matter. A Python file read as data is
never kept on equal tokens (lowering/token_keep.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from lowerd.project.source_map import UserFiles

_recording: list[InputRecorder] = []  # the recorders now running: the innermost hears opens
_hook_installed = False
# Modules that read a source's text for its lines (a traceback, inspect.getsource) on behalf of
# their caller, and the frozen import system's files.
_LINE_READERS = frozenset({"linecache", "tokenize", "inspect", "traceback"})
_IMPORT_SYSTEM = "<frozen importlib."


def _on_audit_event(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or not _recording:
        return
    path, mode = args[0], args[1]
    if isinstance(path, str) and (mode is None or not set(str(mode)) & set("wax+")):
        _recording[-1].heard_open(os.path.abspath(path))  # relative to the cwd of the moment


class InputRecorder:
    def __init__(self, user_files: UserFiles, exclude: Path):
        self.user_files = user_files
        # Plain prefixes of the project root, as written and resolved: thousands of torch modules
        # are ruled out by a string compare before any of them is resolved against the disk.
        self.prefixes = tuple({str(user_files.given_root), str(user_files.root)})
        self.exclude = exclude.resolve()
        self.opened: set[str] = set()
        self.opened_as_data: set[str] = set()

    @contextmanager
    def recording(self) -> Iterator[None]:
        global _hook_installed
        if not _hook_installed:  # audit hooks cannot be removed: install one, gate it
            sys.addaudithook(_on_audit_event)
            _hook_installed = True
        _recording.append(self)
        try:
            yield
        finally:
            _recording.remove(self)

    def heard_open(self, path: str) -> None:
        self.opened.add(path)
        if self._near_root(path) and not self._read_as_code(sys._getframe(2)):
            self.opened_as_data.add(path)

    def _read_as_code(self, frame: FrameType | None) -> bool:
        """Whether the open made in `frame` (the caller of open) reads a source as code: the
        import system's, or linecache's for a caller that is not the project's own code."""
        if frame is None:
            return False
        if frame.f_code.co_filename.startswith(_IMPORT_SYSTEM):
            return True
        if frame.f_globals.get("__name__") not in _LINE_READERS:
            return False
        while frame is not None and frame.f_globals.get("__name__") in _LINE_READERS:
            frame = frame.f_back
        return frame is not None and not self.is_project_file(frame.f_code.co_filename)

    def is_project_file(self, file: str) -> bool:
        """UserFiles.owns, after a string compare that rules out thousands of library files
        without resolving them against the disk."""
        return self._near_root(file) and self.user_files.owns(file)

    def read_as_data(self) -> set[Path]:
        """The project files the build opened as data (resolved): files() has them too."""
        return {Path(path).resolve() for path in self.opened_as_data}

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
