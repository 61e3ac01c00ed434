"""`$/progress` work-done reporting: one progress bar per build, stage by stage.

A client that supports it is asked to create each bar (window/workDoneProgress/create); one that
refuses gets none for that build, and the build goes on. Reports and the end wait for the
creation, so a bar never ends before it began.
"""

from __future__ import annotations

import asyncio

from lsprotocol import types
from pygls.progress import Progress

# Where each stage puts a progress bar; preprocess fills its span as partitions are done.
_STAGE_PERCENT = {
    "load": 5,
    "source_transform": 8,
    "quantize": 10,
    "export": 15,
    "partition": 35,
    "preprocess": 45,
    "emit": 90,
    "write": 95,
}
_PREPROCESS_SPAN = 40


class BuildProgress:
    """The progress bars of the builds running, by build id."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self._bars: dict[int, _Bar] = {}

    def started(self, target: str, build_id: int) -> None:
        self._bars[build_id] = _Bar(self.progress, target, build_id)

    def stage(self, build_id: int, stage: str, detail: str | None) -> None:
        if bar := self._bars.get(build_id):
            bar.report(stage, detail)

    def finished(self, build_id: int | None, message: str) -> None:
        if build_id is not None and (bar := self._bars.pop(build_id, None)):
            bar.end(message)


class _Bar:
    """One build's $/progress: created, begun, reported stage by stage, ended."""

    def __init__(self, progress: Progress, target: str, build_id: int):
        self.progress = progress
        self.target = target
        self.token = f"lowerd-build-{build_id}"
        self.begun = asyncio.get_running_loop().create_task(self._begin())

    async def _begin(self) -> bool:
        try:
            await self.progress.create_async(self.token)
        except Exception:  # the client refused: the build goes on without a progress bar
            return False
        title = f"lowerd: {self.target}"
        self.progress.begin(self.token, types.WorkDoneProgressBegin(title=title, percentage=0))
        return True

    def report(self, stage: str, detail: str | None) -> None:
        if not self._has_begun():
            return  # a stage passed while the bar was being created: the next one shows
        message = f"{stage} {detail}" if detail else stage
        self.progress.report(
            self.token,
            types.WorkDoneProgressReport(message=message, percentage=_percent(stage, detail)),
        )

    def end(self, message: str) -> None:
        def send(_: asyncio.Task[bool]) -> None:
            if self._has_begun():
                self.progress.end(self.token, types.WorkDoneProgressEnd(message=message))

        self.begun.add_done_callback(send)

    def _has_begun(self) -> bool:
        done = self.begun.done() and not self.begun.cancelled()
        return done and self.begun.exception() is None and self.begun.result()


def _percent(stage: str, detail: str | None) -> int:
    """The stage's place on the bar; preprocess's "done/total" partitions move it within."""
    percentage = _STAGE_PERCENT.get(stage, 0)
    if stage == "preprocess" and detail and "/" in detail:
        done, _, total = detail.partition("/")
        if done.isdigit() and total.isdigit() and int(total):
            percentage += _PREPROCESS_SPAN * min(int(done), int(total)) // int(total)
    return percentage
