"""What `lowerd serve` sends an editor, as typed records: the LSP driver (lsp_driver.py) keeps
them in the order it received them, each with the moment it did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsprotocol import types

BUILD_STARTED = "lowerd/buildStarted"
BUILD_WRITTEN = "lowerd/buildWritten"
BUILD_FINISHED = "lowerd/buildFinished"

ProgressValue = (
    types.WorkDoneProgressBegin | types.WorkDoneProgressReport | types.WorkDoneProgressEnd
)
# $/progress values by their "kind"
PROGRESS_KINDS: dict[str, type[ProgressValue]] = {
    "begin": types.WorkDoneProgressBegin,
    "report": types.WorkDoneProgressReport,
    "end": types.WorkDoneProgressEnd,
}


@dataclass(frozen=True, eq=False)
class Published:
    """textDocument/publishDiagnostics: what the editor shows for one file from now on."""

    at: float  # time.perf_counter() when the driver received it
    uri: str
    diagnostics: list[types.Diagnostic]


@dataclass(frozen=True, eq=False)
class BuildNotice:
    """One of lowerd's build notifications; `params` is its JSON object."""

    at: float
    params: dict[str, Any]

    @property
    def target(self) -> str:
        return str(self.params["target"])


class BuildStarted(BuildNotice):
    """lowerd/buildStarted: {target, buildId}."""


class BuildWritten(BuildNotice):
    """lowerd/buildWritten: {target, buildId, sha256}: a verifying build's .pte is written and
    its diagnostics are published; its verification comes with lowerd/buildFinished."""


class BuildFinished(BuildNotice):
    """lowerd/buildFinished: {target, buildId, current, status, errorKind, reused, ...}; a
    build that is not `current` was superseded, and the server shows nothing of it."""

    @property
    def current(self) -> bool:
        return bool(self.params.get("current"))


@dataclass(frozen=True, eq=False)
class Progress:
    """$/progress of a work-done progress the server created: a build's stages."""

    at: float
    token: types.ProgressToken
    value: ProgressValue


@dataclass(frozen=True, eq=False)
class Refresh:
    """A workspace/*/refresh request: code lenses, diagnostics (pulled) or inlay hints."""

    at: float
    method: str


ServerEvent = Published | BuildStarted | BuildWritten | BuildFinished | Progress | Refresh
