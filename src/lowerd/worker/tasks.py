"""Background tasks that nobody awaits, kept alive until they finish.

The event loop holds only weak references to tasks: a task whose creator drops it can be
garbage-collected mid-flight, and a build's result would be lost with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

_running: set[asyncio.Task[Any]] = set()


def spawn(coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(coroutine)
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task
