"""Lines of tables and keys in TOML text, which tomllib does not report: what puts a config
error at its line."""

from __future__ import annotations

import itertools
import re
import tomllib
from bisect import bisect_left

# A key's position in the TOML document; ints index array elements.
KeyPath = tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# Numbers, booleans and dates: none of them contains a character that ends a value.
_BARE_VALUE = re.compile(r"[^,\]}#\n]+")


class KeyLocator:
    """The lines of tables and keys in TOML text, which tomllib does not report.

    It reads only the structure of text tomllib has already accepted: table headers, dotted keys,
    inline tables and arrays (whose elements are numbered), skipping over strings and comments so
    that they cannot be mistaken for keys. Arrays of tables ([[...]]) are not numbered, so keys
    under them resolve to their first occurrence; lowerd has none. The locator is best effort: on
    anything it does not understand it stops, keeping the lines found so far.
    """

    def __init__(self, text: str):
        self.headers: dict[KeyPath, int] = {}  # [table] headers
        self.keys: dict[KeyPath, int] = {}  # keys assigned a value, and array elements
        self.implied: dict[KeyPath, int] = {}  # tables created by a dotted key or deeper header
        self._text = text
        self._pos = 0
        self._newlines = [i for i, c in enumerate(text) if c == "\n"]
        try:
            self._document()
        except Exception:
            pass  # a failure here may only cost line precision, never the error being reported

    def line(self, key: KeyPath) -> int | None:
        for found in (self.headers, self.keys, self.implied):
            if key in found:
                return found[key]
        return None

    def header_line(self, key: KeyPath) -> int | None:
        return self.headers.get(key)

    # The scanner: one method per TOML construct, each leaving _pos just past it.

    def _document(self) -> None:
        table: KeyPath = ()
        while True:
            self._skip_blank()
            start = self._pos
            if start >= len(self._text):
                return
            line = self._line_at(start)
            if self._text.startswith("[", start):
                table = self._header()
                self.headers.setdefault(table, line)
                self._imply(table, 1, line)
            else:
                key = self._key()
                self._expect("=")
                self._define(table, key, line)
                self._value((*table, *key))

    def _header(self) -> KeyPath:
        brackets = "]]" if self._text.startswith("[[", self._pos) else "]"
        self._pos += len(brackets)
        key = self._key()
        self._expect(brackets)
        return key

    def _key(self) -> KeyPath:
        parts = [self._simple_key()]
        self._skip_spaces()
        while self._peek() == ".":
            self._pos += 1
            parts.append(self._simple_key())
            self._skip_spaces()
        return tuple(parts)

    def _simple_key(self) -> str:
        self._skip_spaces()
        start = self._pos
        if self._peek() == '"':
            self._basic_string()
            # tomllib decodes the escapes exactly as it did for the data being checked.
            key: str = tomllib.loads(f"k = {self._text[start : self._pos]}")["k"]
            return key
        if self._peek() == "'":
            self._literal_string()
            return self._text[start + 1 : self._pos - 1]
        match = _BARE_KEY.match(self._text, start)
        if match is None:
            raise ValueError(f"no key at offset {start}")
        self._pos = match.end()
        return match.group()

    def _value(self, key: KeyPath) -> None:
        self._skip_spaces()
        text, pos = self._text, self._pos
        if text.startswith('"""', pos):
            self._multiline_string('"""')
        elif text.startswith("'''", pos):
            self._multiline_string("'''")
        elif text.startswith('"', pos):
            self._basic_string()
        elif text.startswith("'", pos):
            self._literal_string()
        elif text.startswith("[", pos):
            self._array(key)
        elif text.startswith("{", pos):
            self._inline_table(key)
        else:
            match = _BARE_VALUE.match(text, pos)
            if match is None:
                raise ValueError(f"no value at offset {pos}")
            self._pos = match.end()

    def _array(self, key: KeyPath) -> None:
        self._pos += 1
        for index in itertools.count():
            self._skip_blank()
            if self._peek() == "]":
                self._pos += 1
                return
            self.keys.setdefault((*key, index), self._line_at(self._pos))
            self._value((*key, index))
            self._skip_blank()
            if self._peek() == ",":
                self._pos += 1

    def _inline_table(self, key: KeyPath) -> None:
        self._pos += 1
        while True:
            self._skip_blank()
            if self._peek() == "}":
                self._pos += 1
                return
            line = self._line_at(self._pos)
            inner = self._key()
            self._expect("=")
            self._define(key, inner, line)
            self._value((*key, *inner))
            self._skip_blank()
            if self._peek() == ",":
                self._pos += 1

    def _basic_string(self) -> None:
        self._pos += 1
        while (c := self._peek()) != '"':
            if c in ("", "\n"):
                raise ValueError("unterminated string")
            self._pos += 2 if c == "\\" else 1
        self._pos += 1

    def _literal_string(self) -> None:
        end = self._text.find("'", self._pos + 1)
        if end < 0:
            raise ValueError("unterminated string")
        self._pos = end + 1

    def _multiline_string(self, quotes: str) -> None:
        self._pos += 3
        while not self._text.startswith(quotes, self._pos):
            if self._pos >= len(self._text):
                raise ValueError("unterminated string")
            escaped = quotes == '"""' and self._peek() == "\\"
            self._pos += 2 if escaped else 1
        self._pos += 3
        # Up to two quotes right before the closing ones belong to the string: """a""""".
        for _ in range(2):
            if self._peek() == quotes[0]:
                self._pos += 1

    def _define(self, table: KeyPath, key: KeyPath, line: int) -> None:
        full = (*table, *key)
        self.keys.setdefault(full, line)
        self._imply(full[:-1], len(table) + 1, line)

    def _imply(self, key: KeyPath, shortest: int, line: int) -> None:
        for length in range(shortest, len(key) + 1):
            self.implied.setdefault(key[:length], line)

    def _expect(self, token: str) -> None:
        self._skip_spaces()
        if not self._text.startswith(token, self._pos):
            raise ValueError(f"expected {token!r} at offset {self._pos}")
        self._pos += len(token)

    def _skip_spaces(self) -> None:
        while self._peek() in (" ", "\t"):
            self._pos += 1

    def _skip_blank(self) -> None:
        """Spaces, newlines and comments."""
        while (c := self._peek()) in (" ", "\t", "\r", "\n", "#"):
            if c == "#":
                end = self._text.find("\n", self._pos)
                self._pos = len(self._text) if end < 0 else end
            else:
                self._pos += 1

    def _peek(self) -> str:
        # "" at the end of the text, which matches none of the characters scanned for
        return self._text[self._pos : self._pos + 1]

    def _line_at(self, pos: int) -> int:
        return bisect_left(self._newlines, pos) + 1
