"""Replace a file in one step: a reader sees the old content or the new, never part of either.

lowerd's one atomic write: the .pte, a target's build state, the daemon's status file and the
blob store's entries all go through it. It lives in cache/ because every layer may import cache/.
The temp file is made in the target's folder (a rename is atomic within one file system only),
named with a leading dot so nothing takes it for the file, and removed on any failure, an
interrupt included.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

# What mkstemp makes: the file is the user's alone unless a caller asks for more.
PRIVATE_FILE = 0o600


def write_atomic(
    path: Path,
    data: bytes | Iterable[bytes],
    *,
    mode: int = PRIVATE_FILE,
    temp_prefix: str | None = None,
) -> None:
    """Write data (bytes, or chunks of them) to path through a temp file renamed over it.

    The file gets exactly `mode`, whatever the umask. The temp file is named temp_prefix followed
    by random characters (by default `.<name>.`, ending `.tmp`). The folder must exist. An OSError
    of the write or the rename is raised as it is; the temp file is gone either way.
    """
    prefix = f".{path.name}." if temp_prefix is None else temp_prefix
    fd, temp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), mode)
            file.writelines([data] if isinstance(data, bytes) else data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
