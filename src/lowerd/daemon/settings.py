"""The editor's settings for lowerd (section "lowerd"), from initializationOptions and from
workspace/didChangeConfiguration. A bad value is named and ignored, never fatal."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from lowerd.project.backends import KNOWN_BACKENDS

SECTION = "lowerd"
# How a not-delegated op is shown; daemon/diagnostics.py maps each to the LSP's severity.
Severity = Literal["warning", "information", "hint"]
SEVERITY_NAMES: tuple[str, ...] = get_args(Severity)
# Without a timeout from the editor or from [tool.lowerd] timeout, a build that hangs holds a
# worker this long; a save of the target cancels it sooner.
DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class Settings:
    not_delegated_severity: Severity = "warning"
    worker_timeout: float | None = None  # seconds; None: the config's timeout, else the default
    worker_memory_limit_mb: int | None = None
    workers: int | None = None  # None: the --workers flag
    config: str | None = None  # a pyproject.toml to use instead of the one found from the root
    backends: tuple[str, ...] | None = None  # lowers every target with these instead
    inlay_hints: bool = True  # `→ XNNPACK #2` / `→ CPU` at the end of each line that made ops

    def updated(self, raw: Any) -> tuple[Settings, list[str]]:
        """These settings with the values in `raw` applied, and a complaint per bad value.

        `raw` is the "lowerd" section, or an object that holds it under "lowerd".
        """
        if not isinstance(raw, Mapping):
            return self, []
        if isinstance(raw.get(SECTION), Mapping):
            raw = raw[SECTION]
        changes: dict[str, Any] = {}
        problems: list[str] = []
        for key, (field, parse) in _FIELDS.items():
            if key not in raw:
                continue
            try:
                changes[field] = parse(raw[key])
            except ValueError as error:
                problems.append(f"lowerd setting {key}: {error}; keeping the previous value")
        return replace(self, **changes), problems

    def timeout(self, config_timeout: float | None) -> float:
        return self.worker_timeout or config_timeout or DEFAULT_TIMEOUT

    @property
    def memory_limit(self) -> int | None:
        return self.worker_memory_limit_mb * 2**20 if self.worker_memory_limit_mb else None


def _severity(value: Any) -> str:
    if not isinstance(value, str) or value.lower() not in SEVERITY_NAMES:
        raise ValueError(f"expected one of {', '.join(SEVERITY_NAMES)}, got {value!r}")
    return value.lower()


def _positive_number(value: Any) -> float | None:
    if value is None:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value <= 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return float(value)


def _positive_int(value: Any) -> int | None:
    number = _positive_number(value)
    if number is None:
        return None
    if number != int(number):
        raise ValueError(f"expected a whole number, got {value!r}")
    return int(number)


def _backends(value: Any) -> tuple[str, ...] | None:
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of backend names, got {value!r}")
    unknown = [v for v in value if v not in KNOWN_BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend {unknown[0]!r}; known: {', '.join(KNOWN_BACKENDS)}")
    return tuple(dict.fromkeys(value))


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _path(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"expected a path, got {value!r}")
    return value or None


_FIELDS = {
    "notDelegatedSeverity": ("not_delegated_severity", _severity),
    "workerTimeout": ("worker_timeout", _positive_number),
    "workerMemoryLimit": ("worker_memory_limit_mb", _positive_int),
    "workers": ("workers", _positive_int),
    "config": ("config", _path),
    "backends": ("backends", _backends),
    "inlayHints": ("inlay_hints", _flag),
}
