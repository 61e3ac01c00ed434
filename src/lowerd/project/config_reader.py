"""What every check of a TOML file lowerd reads shares ([tool.lowerd], lowerd.baseline.toml): the
file read and parsed with each failure at its line, the line of each key in it (so an error is
blamed on the key at fault), and the words an error uses to name a value."""

from __future__ import annotations

import difflib
import json
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeAlias, TypeVar

from lowerd.cache.regular_file import read_regular_file
from lowerd.project.errors import ConfigError
from lowerd.project.toml_lines import KeyLocator, KeyPath

LOWERD: KeyPath = ("tool", "lowerd")
TARGETS: KeyPath = (*LOWERD, "targets")

# A TOML table as tomllib gives it, before any check.
Table = Mapping[str, object]
T = TypeVar("T")

_TOML_POSITION = re.compile(r"\s*\(at (?:line (\d+), column (\d+)|end of document)\)\s*$")
_INTEGER = re.compile(r"[0-9][0-9_]*")


# Reading and parsing -------------------------------------------------------------------------


def read_toml(path: Path) -> tuple[str, dict[str, object]]:
    """A TOML file's text (what a KeyReader locates keys in) and its tables; a missing,
    unreadable, non-UTF-8 or invalid file is a ConfigError at its line."""
    text = decode_text(read_bytes(path), path)
    return text, parse_toml(text, path)


def read_bytes(path: Path) -> bytes:
    """A regular file's bytes, read without blocking (a client may name a FIFO or a device)."""
    try:
        return read_regular_file(path)
    except FileNotFoundError:
        raise ConfigError("file not found", path) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path) from None


def decode_text(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError("not valid UTF-8 text", path, line) from None


def parse_toml(text: str, path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message, line = _split_toml_position(str(e), text)
        raise ConfigError(f"invalid TOML: {message}", path, line) from None
    except ValueError:  # int() refuses an integer literal past its digit limit, at no position
        limit = sys.get_int_max_str_digits()
        message = f"invalid TOML: an integer of more than {limit} digits"
        raise ConfigError(message, path, _long_integer_line(text, limit)) from None


def _split_toml_position(message: str, text: str) -> tuple[str, int | None]:
    """tomllib appends "(at line N, column M)" to its messages: move N to the error's location
    and keep the column in a shorter message."""
    match = _TOML_POSITION.search(message)
    if match is None:
        return message, None
    message = message[: match.start()]
    if match.group(1) is None:  # "at end of document": blame the last line
        return f"{message} at end of file", max(len(text.splitlines()), 1)
    return f"{message} (column {match.group(2)})", int(match.group(1))


def _long_integer_line(text: str, limit: int) -> int | None:
    """The line of the first run of more than `limit` digits (underscores between them)."""
    for match in _INTEGER.finditer(text):
        if len(match.group().replace("_", "")) > limit:
            return text.count("\n", 0, match.start()) + 1
    return None


# Checking keys -------------------------------------------------------------------------------


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


_LONGEST_SHOWN = 40
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
    shown = json.dumps(value)
    if isinstance(value, int) and len(shown) > _LONGEST_SHOWN:  # the message stays one line
        return f"an integer of {len(shown.lstrip('-'))} digits"
    return f"the {kind} {shown}"


def article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"
