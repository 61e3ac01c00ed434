"""Folders no target reads a source from (.git, virtual environments, caches): the watcher leaves
them unwatched and ignores their events, the scheduler ignores changes in them. One list for both.
"""

from __future__ import annotations

from pathlib import Path

IGNORED_FOLDERS = frozenset({".git", ".venv", "venv", "__pycache__", ".lowerd", "node_modules"})


def in_ignored_folder(path: Path) -> bool:
    """Whether a folder on path (or path itself) is one of IGNORED_FOLDERS."""
    return not IGNORED_FOLDERS.isdisjoint(path.parts)
