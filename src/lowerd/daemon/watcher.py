"""File changes made outside the editor (git checkout, code generators), seen with watchdog.

The observer's thread only filters paths and hands each change to the event loop; the scheduler
there decides what to rebuild. Folders that are never a target's source (.git, .venv, the build
output) are left unwatched where possible, and their events ignored everywhere.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_CLOSED,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from lowerd.daemon.ignored_folders import in_ignored_folder

# Opening or reading a file is no change; "closed" is a file closed after writing.
_CHANGES = {
    EVENT_TYPE_CREATED,
    EVENT_TYPE_MODIFIED,
    EVENT_TYPE_MOVED,
    EVENT_TYPE_DELETED,
    EVENT_TYPE_CLOSED,
}


class ProjectWatcher(FileSystemEventHandler):
    def __init__(
        self,
        root: Path,
        on_change: Callable[[Path], None],
        loop: asyncio.AbstractEventLoop,
        ignore: Iterable[Path] = (),
    ):
        self.root = Path(os.path.realpath(root))
        self.on_change = on_change
        self.loop = loop
        self.ignore: tuple[Path, ...] = ()
        self.set_ignored(ignore)
        self._observer = Observer()

    def start(self) -> None:
        # The root itself flat, and each of its folders deeply unless ignored: a .venv inside
        # the project would otherwise cost an inotify watch per folder of every package.
        self._observer.schedule(self, str(self.root), recursive=False)
        for child in self.root.iterdir():
            if child.is_dir() and not self._ignored(child):
                self._observer.schedule(self, str(child), recursive=True)
        self._observer.daemon = True
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()

    def set_ignored(self, folders: Iterable[Path]) -> None:
        self.ignore = tuple(Path(os.path.realpath(f)) for f in folders)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _CHANGES:
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if not raw:
                continue
            path = Path(os.fsdecode(raw))
            if event.is_directory:
                self._watch_new_folder(path, event.event_type)
            elif not self._ignored(path):
                self.loop.call_soon_threadsafe(self.on_change, path)

    def _watch_new_folder(self, path: Path, event_type: str) -> None:
        """A folder created at the top (a checkout adding one) is watched like the others."""
        if event_type in (EVENT_TYPE_CREATED, EVENT_TYPE_MOVED) and path.parent == self.root:
            if path.is_dir() and not self._ignored(path):
                self._observer.schedule(self, str(path), recursive=True)

    def _ignored(self, path: Path) -> bool:
        if in_ignored_folder(path):
            return True
        return any(path.is_relative_to(folder) for folder in self.ignore)
