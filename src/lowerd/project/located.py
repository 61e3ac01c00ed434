"""A config value together with the pyproject.toml line that gave it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class Located(Generic[T_co]):
    """`value` as [tool.lowerd] gave it, and its line: where a failure to use the value (a
    missing file, a function that raises) is blamed, after the config itself was accepted."""

    value: T_co
    line: int
