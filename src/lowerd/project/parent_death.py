"""Processes lowerd forks die with their parent: prctl(PR_SET_PDEATHSIG) through ctypes.

A SIGKILL of the parent runs none of its clean-up, so only the kernel can end what it started:
the fork server while it warms up (worker/forkserver.py), a build worker's runtime zygote and
its children (lowering/runtime_zygote.py): a runtime child lived on with parent 1, holding the
CLI's stdout open.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def set_parent_death_signal(signum: int) -> None:
    """`signum` is sent to this process when the thread that started it ends (0: none). Linux
    only; elsewhere nothing (the parents' own kills stay)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signum), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent(signum: int, parent: int) -> None:
    """Set the parent death signal and exit at once when `parent` (the pid it had when forked)
    was gone before it was set: then the signal would never come."""
    set_parent_death_signal(signum)
    if os.getppid() != parent:
        os._exit(0)
