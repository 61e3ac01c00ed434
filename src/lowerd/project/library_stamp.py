"""The code a build ran from outside the project, stamped: every module file it had imported.

A build's program depends on the libraries' code as much as on the user's (transformers' model
classes, torch's decompositions). Their versions are in the build record's inputs for torch,
ExecuTorch and lowerd only; an upgraded transformers or an edited editable install changes none
of them. What is stamped here is each imported module file's size, mtime and inode, digested
into one value: a stat per file (some thousands for an LLM build, tens of milliseconds), never a
hash. Any moved stat (a reinstall of the same version too) says the libraries may have changed:
what relies on it (lowering/token_keep.py) then does the full build. No torch here.
"""

from __future__ import annotations

import base64
import hashlib
import os
import sys
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass
class LibraryStamp:
    """The module files' paths (newline-joined, zlib-compressed, base64: a few tens of KB for
    thousands of paths) and the digest of their stats and of the interpreter's version."""

    paths: str
    digest: str

    @classmethod
    def of(cls, paths: Iterable[str]) -> LibraryStamp:
        ordered = sorted(set(paths))
        packed = zlib.compress("\n".join(ordered).encode(errors="surrogatepass"))
        return cls(base64.b64encode(packed).decode("ascii"), _digest(ordered))

    def unchanged(self) -> bool:
        try:
            joined = zlib.decompress(base64.b64decode(self.paths, validate=True))
        except (ValueError, zlib.error):
            return False
        paths = joined.decode(errors="surrogatepass").split("\n") if joined else []
        return _digest(paths) == self.digest


def imported_library_files(is_project: Callable[[str], bool]) -> list[str]:
    """The files of every module imported now but the project's own (`is_project`)."""
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    return [f for f in files if isinstance(f, str) and os.path.isabs(f) and not is_project(f)]


def _digest(paths: list[str]) -> str:
    digest = hashlib.sha256(sys.version.encode() + b"\0")
    for path in paths:
        try:
            status = os.stat(path)
            stamp = f"{status.st_size}:{status.st_mtime_ns}:{status.st_ino}"
        except OSError:
            stamp = "missing"
        digest.update(f"{path}\0{stamp}\0".encode(errors="surrogatepass"))
    return digest.hexdigest()
