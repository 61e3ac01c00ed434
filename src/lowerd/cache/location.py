"""Where the cache lives by default and how its size limit is written: paths and byte sizes."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
_MULTIPLIERS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(
    r"(?P<number>\d+(?:\.\d+)?|\.\d+)\s*(?:(?P<unit>[kmgt])(?:i?b)?|b)?", re.IGNORECASE
)

DEFAULT_MAX_BYTES = 5 * 1024**3


def default_cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """$LOWERD_CACHE_DIR, else $XDG_CACHE_HOME/lowerd, else ~/.cache/lowerd."""
    if explicit := env.get("LOWERD_CACHE_DIR"):
        return Path(explicit).expanduser()
    xdg = env.get("XDG_CACHE_HOME")
    # The XDG base directory spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "lowerd"
    return Path.home() / ".cache" / "lowerd"


def parse_size(text: str) -> int:
    """Bytes in a size such as "500M", "2G", "1.5GiB" or "1024"; units are binary (K = 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"invalid size {text!r}: expected a number with an optional unit K, M, G or T "
            "(for example 500M, 2G or 1.5GiB)"
        )
    multiplier = _MULTIPLIERS[(match["unit"] or "").lower()]
    # Decimal keeps "1.5G" exact; a fraction of a byte is dropped.
    return int(Decimal(match["number"]) * multiplier)


def format_size(n: int) -> str:
    """A byte count for people: "512 B", "1.5 GiB", "5 GiB"."""
    if n < 0:
        raise ValueError(f"a size cannot be negative: {n}")
    value, unit = float(n), _UNITS[0]
    for bigger in _UNITS[1:]:
        # Compare the rounded value so 1023.97 KiB reads "1 MiB", not "1024 KiB".
        if round(value, 1) < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f}".removesuffix(".0") + f" {unit}"
