"""A real one-node Ray cluster for a test or a benchmark: its own session and temp folder, a free
port, no dashboard. Ready when `ray start` says the runtime started, not after a sleep; ended by
killing its process group, never `ray stop` (which ends every Ray on the machine).

Used by tests/test_ray_executor.py and bench/bench_scale.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from testkit.ports import free_port

RAY = Path(sys.executable).with_name("ray")
STARTED = "Ray runtime started"


class RayStartFailed(RuntimeError):
    pass


@contextmanager
def ray_cluster(folder: Path, cpus: int = 2, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """The cluster's address while the block runs. `folder` should be short: Ray's Unix sockets
    live under it, and their paths are capped at 107 bytes. Its workers inherit `env`."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [str(RAY), "start", "--head", "--block", f"--port={free_port()}"]
    command += ["--node-ip-address=127.0.0.1", f"--temp-dir={folder}", f"--num-cpus={cpus}"]
    command += ["--include-dashboard=false", "--disable-usage-stats"]
    port = command[4].removeprefix("--port=")
    head = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # Ray's processes share its group: killed together below
        env={**(env if env is not None else os.environ), "RAY_USAGE_STATS_ENABLED": "0"},
    )
    drain: threading.Thread | None = None
    try:
        assert head.stdout is not None
        seen = []
        for line in head.stdout:  # until it says it runs (or ends: the loop stops)
            seen.append(line)
            if STARTED in line:
                break
        else:
            raise RayStartFailed("ray start ended:\n" + "".join(seen[-30:]))
        # Keep reading what it prints while it runs: a full pipe would stall it.
        drain = threading.Thread(target=head.stdout.read, daemon=True)
        drain.start()
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group ended on its own
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        if drain is not None:
            drain.join()
        if head.stdout is not None:
            head.stdout.close()
