"""Helpers shared by the test modules: one deadline, atomic edits, waiting on a condition.

No test module imports another; what two of them share lives here (or in stock.py when it is
about the stock ExecuTorch reference).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# One deadline for every wait in the tests, in seconds. It is a bound on a hang, not a measure:
# a loaded machine (CI, other engineers' runs) raises LOWERD_TEST_TIMEOUT_SCALE, never the tests.
DEADLINE = 120 * float(os.environ.get("LOWERD_TEST_TIMEOUT_SCALE", "1"))

_POLL_SECONDS = 0.05


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path`'s content in one step: a reader (a build worker, the file watcher) sees the
    old text or the new one, never a truncated file."""
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def wait_until(
    predicate: Callable[[], T], deadline: float = DEADLINE, what: str = "the condition"
) -> T:
    """Poll `predicate` until it returns something truthy and return that; fail after `deadline`
    seconds, naming `what` was awaited."""
    give_up = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > give_up:
            raise AssertionError(f"waited {deadline:.0f} s for {what}")
        time.sleep(_POLL_SECONDS)
