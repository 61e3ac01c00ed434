"""What every [tool.lowerd] value check shares: the file being read, the line of each key in it
(so an error is blamed on the key at fault), and the words an error uses to name a value."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias, TypeVar

from lowerd.project.errors import ConfigError
from lowerd.project.toml_lines import KeyLocator, KeyPath

LOWERD: KeyPath = ("tool", "lowerd")
TARGETS: KeyPath = (*LOWERD, "targets")

# A TOML table as tomllib gives it, before any check.
Table = Mapping[str, object]
T = TypeVar("T")


class KeyReader:
    """One pyproject.toml being read: makes errors at the line of the key they blame."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.root = path.parent
        self.locator = KeyLocator(text)

    def error(self, message: str, key: KeyPath) -> ConfigError:
        return ConfigError(message, self.path, self.line(key))

    def line(self, key: KeyPath) -> int | None:
        """The key's line, else that of the nearest enclosing table the locator found."""
        while key:
            line = self.locator.line(key)
            if line is not None:
                return line
            key = key[:-1]
        return None

    def check_keys(self, table: Table, allowed: Sequence[str], key: KeyPath, where: str) -> None:
        for name in table:
            if name not in allowed:
                hint = did_you_mean(name, allowed)
                raise self.error(
                    f"unknown key {name!r} in {where}{hint}; allowed keys: {', '.join(allowed)}",
                    (*key, name),
                )

    def check_name(self, what: str, name: str, valid: Sequence[str], key: KeyPath) -> None:
        """name is one of valid, else an error listing them (`what`: whose value it is)."""
        if name not in valid:
            hint = did_you_mean(name, valid)
            raise self.error(
                f"unknown {what} value {name!r}{hint}; valid values: {', '.join(valid)}", key
            )


# A key's check: the value tomllib gave, at that key, to what the config holds; or a ConfigError.
Read: TypeAlias = Callable[[KeyReader, object, KeyPath], T]


def key_name(key: KeyPath) -> str:
    """The name a key is written with: the last part of its path."""
    return str(key[-1])


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    # Compared lowercased so that "XNNPACK" still finds "xnnpack".
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


_SCALAR_KINDS = {bool: "boolean", int: "integer", float: "float", str: "string"}


def describe(value: object) -> str:
    """The value as a TOML user would name it: 'the integer -1', 'an array'."""
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    kind = _SCALAR_KINDS.get(type(value))
    if kind is None:  # dates and times
        return f"a {type(value).__name__}"
    return f"the {kind} {json.dumps(value)}"


def article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
