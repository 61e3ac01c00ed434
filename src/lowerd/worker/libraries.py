"""Installed libraries a fork server keeps warm, so each build skips importing them again.

A build worker imports the project's modules fresh (they change between saves), and with them
the libraries they use: `transformers` costs seconds per build. Those live in the environment's
site-packages and change only when packages are installed or removed, so the fork server imports
the ones a build used (its next forks start with them) and is replaced when the environment
changes: a package installed, upgraded or removed renames or removes an entry of site-packages,
which moves the folder's mtime.

Only modules whose file lies in site-packages and outside the project are kept: an editable
install or a folder on sys.path is the user's code and stays fresh.
"""

from __future__ import annotations

import site
import sys
import sysconfig
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import ModuleType

# Names whose module is the build's own or the process's: never preloaded.
_OWN = ("lowerd", "__main__", "__mp_main__")


@cache
def library_roots() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    candidates = [paths["purelib"], paths["platlib"], *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    roots = []
    for candidate in candidates:
        root = Path(candidate).resolve()
        if root not in roots:
            roots.append(root)
    return tuple(roots)


def environment_stamp() -> tuple[tuple[str, int], ...]:
    """Changes when a package is installed, upgraded or removed."""
    stamp = []
    for root in library_roots():
        try:
            stamp.append((str(root), root.stat().st_mtime_ns))
        except OSError:
            stamp.append((str(root), -1))
    return tuple(stamp)


def imported_libraries(before: Iterable[str], project_root: Path) -> list[str]:
    """Modules of installed packages imported since `before`, in import order."""
    known = set(before)
    project = project_root.resolve()
    return [
        name
        for name, module in list(sys.modules.items())
        if name not in known and _is_library(name, module, project)
    ]


def _is_library(name: str, module: ModuleType | None, project: Path) -> bool:
    if module is None or name.split(".")[0] in _OWN:
        return False
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return False
    path = Path(file).resolve()
    if path.is_relative_to(project):
        return False
    return any(path.is_relative_to(root) for root in library_roots())
