"""Errors that point at the user's input: every one carries the file and line to blame."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lowerd.project.printable import printable
from lowerd.project.result import ErrorInfo


@dataclass
class Location:
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}" if self.line else self.file


class LowerdError(Exception):
    """A failure caused by the user's project, reported at its location instead of a traceback."""

    kind = "error"

    def __init__(
        self, message: str, file: str | Path | None = None, line: int | None = None
    ) -> None:
        message = printable(message)  # it quotes the user's input: shown, never acted on
        super().__init__(message)
        self.message = message
        self.location = Location(str(file) if file is not None else None, line)

    def __str__(self) -> str:
        where = str(self.location)
        return f"{where}: {self.message}" if where else self.message

    def info(self) -> ErrorInfo:
        """The error as a target result carries it (project/result.py)."""
        return ErrorInfo(self.kind, self.message, self.location.file, self.location.line)


class ConfigError(LowerdError):
    """The [tool.lowerd] configuration is missing, malformed or names something unknown."""

    kind = "config-error"


class EntryError(LowerdError):
    """A target's entry cannot be loaded or returned something lowerd cannot lower."""

    kind = "entry-error"


class ExportError(LowerdError):
    """torch.export rejected one of the target's methods."""

    kind = "export-error"


class LoweringError(LowerdError):
    """ExecuTorch's partitioner, a backend's preprocess or the emitter failed."""

    kind = "lowering-error"


class BackendUnavailableError(LoweringError):
    """A backend's partitioner cannot be imported here (CoreML's without coremltools): the
    backend's fault, not the model's. `lowerd compare` shows it as that backend's column."""

    kind = "backend-unavailable"


class OutputError(LowerdError):
    """A file lowerd writes in `out_dir` (the .pte, its data files, the build record) could not
    be written: a full or read-only disk, a folder or file in its place. Blamed on the out_dir
    key, whose folder it is."""

    kind = "output-error"
