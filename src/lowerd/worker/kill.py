"""Ending a build worker and whatever it started."""

from __future__ import annotations

import os
import signal


def kill_worker(pid: int) -> None:
    """SIGKILL the worker's process group, which it leads once it has called setsid().

    A kill that arrives before that call finds no such group: then the worker itself is killed,
    or a cancelled build would run on.
    """
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            continue
        except PermissionError:  # the pid is no longer our worker's
            return
