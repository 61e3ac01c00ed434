"""The daemon's side of `lowerd compare`: a target built once per backend in the warm workers.

Both of the daemon's front ends use it: the private socket's `compare` request (daemon/rpc.py,
for `lowerd compare` in a terminal) and the language server's `lowerd.compare` command. As with
builds, user code runs only in the forked workers; what is up to date is answered here from the
compare's own build records (project/compare.py), without a worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lowerd.daemon.commands import CompareRefusal, compare_arguments
from lowerd.daemon.rpc_messages import ProgressFrame
from lowerd.project.batch import Outcome
from lowerd.project.compare import CompareBatch
from lowerd.project.compare_result import CompareResult
from lowerd.project.config import ProjectConfig
from lowerd.project.errors import LowerdError
from lowerd.project.result import TargetResult
from lowerd.project.wire import WireError
from lowerd.worker.protocol import ProgressEvent, WorkerEvent, WorkerJob
from lowerd.worker.workers import WorkerPool

SendFrame = Callable[[ProgressFrame], None]
# The language server's command (daemon/commands.py CompareArguments); the editors' "Compare
# backends" (lowerd.compareBackends) call it and show the answer as a table.
COMPARE = "lowerd.compare"


class CompareService:
    def __init__(self, pool: WorkerPool):
        self.pool = pool

    async def compare(
        self,
        config_path: str,
        target: str,
        backends: str | Sequence[str] | None,
        use_cache: bool = True,
        send: SendFrame | None = None,
        memory_limit: int | None = None,
    ) -> tuple[CompareResult, Outcome]:
        """The compare and how it ended; ConfigError for an unknown target or backend.

        The stale backends are submitted at once: the pool runs as many as it has workers.
        Cancelling it (the client went away) kills their workers.
        """
        batch = await asyncio.to_thread(
            CompareBatch.load, Path(config_path), target, backends, use_cache
        )
        await asyncio.to_thread(batch.answer_up_to_date)
        stale = batch.stale
        built = await asyncio.gather(
            *(self._build(batch, backend, send, memory_limit) for backend in stale)
        )
        batch.results.update(zip(stale, built, strict=True))
        return await asyncio.to_thread(batch.outcome)

    async def _build(
        self,
        batch: CompareBatch,
        backend: str,
        send: SendFrame | None,
        memory_limit: int | None,
    ) -> TargetResult:
        job = WorkerJob(
            str(batch.config.path),
            batch.target.name,
            timeout=batch.config.timeout,
            memory_limit=memory_limit,
            use_cache=batch.use_cache,
            backends=(backend,),
            out_dir=str(batch.config_for(backend).out_dir),
        )
        label = f"{batch.target.name} on {backend}"

        def on_event(event: WorkerEvent) -> None:
            if send is not None and isinstance(event, ProgressEvent):
                send(ProgressFrame(label, event.stage, event.detail))

        handle = self.pool.submit(job, on_event)
        try:
            return await handle.result()
        except asyncio.CancelledError:
            handle.cancel()
            raise


async def compare_answer(
    pool: WorkerPool | None,
    config: ProjectConfig | None,
    arguments: Sequence[Any],
    memory_limit: int | None = None,
) -> CompareResult | CompareRefusal:
    """The language server's answer: what `lowerd compare --json` prints, or a refusal when
    there is nothing to compare."""
    try:
        asked = compare_arguments(arguments)
    except WireError as error:
        return CompareRefusal("", f"lowerd.compare takes [target, backends?]: {error}")
    if pool is None or config is None:
        return CompareRefusal(asked.target, "no lowerd project is loaded")
    if not asked.target:
        return CompareRefusal("", "which target? lowerd.compare takes [target, backends?]")
    try:
        compared, _ = await CompareService(pool).compare(
            str(config.path), asked.target, asked.backends or None, memory_limit=memory_limit
        )
    except LowerdError as error:
        return CompareRefusal(asked.target, str(error), config=str(config.path))
    return compared
