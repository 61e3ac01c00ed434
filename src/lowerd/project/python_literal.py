"""Python source for a value, so that generated code (the stock script, project/reproducer.py)
is built from values and never from pasted text: `literal(value)` evaluates back to `value`
whatever its strings hold (quotes, backslashes, newlines) and whatever its floats are (repr
writes `inf` and `nan`, names no script defines)."""

from __future__ import annotations

import math
from typing import Any


def literal(value: Any) -> str:
    """The source of a TOML-shaped value: None, booleans, numbers, strings, lists, tuples and
    tables of them. Anything else is refused rather than written as its repr."""
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({repr(str(value))})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    if isinstance(value, tuple):
        items = [literal(item) for item in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, dict):
        pairs = (f"{literal(key)}: {literal(item)}" for key, item in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no Python literal for a {type(value).__name__}")


def identifier(name: str) -> str:
    """A name written as code (a keyword argument, an attribute): refused unless it is one."""
    if not name.isidentifier():
        raise ValueError(f"{name!r} is not a Python identifier")
    return name
