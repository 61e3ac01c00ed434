"""A real redis-server for a test or a benchmark: its own folder, a free port, no persistence.

Ready when the server says so on its log ("Ready to accept connections"), not after a sleep.
Used by tests/test_remote_cache.py and bench/bench_scale.py.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from testkit.ports import free_port

if TYPE_CHECKING:
    import redis

READY = "Ready to accept connections"


@dataclass
class RedisServer:
    process: subprocess.Popen[str]
    port: int
    folder: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=0)

    def kill(self) -> None:
        """Gone at once, as a crashed or unplugged server is."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def have_redis_server() -> bool:
    return shutil.which("redis-server") is not None


@contextmanager
def redis_server(folder: Path, *options: str) -> Iterator[RedisServer]:
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(5):  # another process may take the free port before redis binds it
        port = free_port()
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
        process = subprocess.Popen(
            [*command, "--dir", str(folder), "--save", "", "--appendonly", "no", *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        drain = _wait_ready(process)
        if drain is not None:
            break
    else:
        raise RuntimeError("redis-server did not start")
    server = RedisServer(process, port, folder)
    try:
        yield server
    finally:
        server.kill()
        drain.join()  # the log ends with the process
        if process.stdout is not None:
            process.stdout.close()


def _wait_ready(process: subprocess.Popen[str]) -> threading.Thread | None:
    """Once it is ready, a thread that keeps reading its log (a full pipe would stall it) until
    it exits; None if it exited first (its port was taken, or it could not start)."""
    assert process.stdout is not None
    for line in process.stdout:
        if READY in line:
            drain = threading.Thread(target=process.stdout.read, daemon=True)
            drain.start()
            return drain
    process.wait()
    return None
