"""How many threads this process has: what a fork of it would copy (one function for the fork
server's check of its preload and the runtime zygote's of its parent)."""

from __future__ import annotations

import os


def thread_count() -> int:
    """This process's threads (/proc/self/task; 1 where there is no /proc)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1
