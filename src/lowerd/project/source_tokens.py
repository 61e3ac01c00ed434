"""A Python source's token stream, and where each line of one stream went in an equal other.

Two sources whose streams are equal compile to the same code but for its line numbers: the
compiler sees tokens (`tokenize` is the language's own lexer), never comments, blank lines or
the spaces between tokens. So an edit of comments and layout only changes the program through
the lines a traceback or a node's stack trace names, and each such line is the line of a token
(an AST node starts at its first token). The stream kept here is every token but COMMENT and NL,
compared by type and string, except NEWLINE, DEDENT and ENDMARKER, compared by type (their
string is a line ending or empty): a docstring, a string, an indentation or the encoding cookie
(the ENCODING token) that changes is a change, and so is a type comment, which TorchScript reads.
Line continuations make no token.

`line_map` says where each old line went: the new line of the tokens that started on it. A
line whose tokens went to two new lines (a call split over lines) or on which no token starts
(a comment, a blank line) has no place: a report that names it cannot be moved, and the caller
builds afresh. No torch here: the build record keeps each source's stream (its digest and the
line of each token) and the keep is decided before anything is imported.
"""

from __future__ import annotations

import hashlib
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_LAYOUT = frozenset({tokenize.COMMENT, tokenize.NL})
# A type comment is read by TorchScript (`# type: (Tensor) -> Tensor`): it stays in the stream.
_TYPE_COMMENT = re.compile(r"#\s*type:")
# Tokens whose string is a line ending or empty: their type is the whole of them.
_TYPE_ONLY = frozenset({tokenize.NEWLINE, tokenize.DEDENT, tokenize.ENDMARKER})


@dataclass
class SourceTokens:
    """A source's stream as a build read it: the digest of its tokens (type and string, in
    order) and the line each token starts on, in the same order."""

    digest: str
    lines: list[int] = field(default_factory=list)


def source_tokens(data: bytes) -> SourceTokens | None:
    """The stream of a source's bytes (decoded as Python does: its cookie, else UTF-8); None
    when they do not tokenize (an unterminated string, a bad encoding, a stray character)."""
    digest, lines = hashlib.sha256(), []
    try:
        for token in tokenize.tokenize(io.BytesIO(data).readline):
            if token.type == tokenize.ERRORTOKEN:
                return None
            if token.type in _LAYOUT and not _TYPE_COMMENT.match(token.string):
                continue
            text = "" if token.type in _TYPE_ONLY else token.string
            digest.update(f"{token.type}\0{text}\0".encode(errors="surrogatepass"))
            lines.append(token.start[0])
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    return SourceTokens(digest.hexdigest(), lines)


def recorded_tokens(sources: Iterable[tuple[str, str]]) -> dict[str, SourceTokens]:
    """The streams of the (path, sha256) sources that are Python files still holding the bytes
    of that digest (a source saved since it was stamped has none: it is not kept on tokens)."""
    streams = {}
    for path, sha256 in sources:
        if not path.endswith(".py"):
            continue
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        tokens = source_tokens(data) if hashlib.sha256(data).hexdigest() == sha256 else None
        if tokens is not None:
            streams[path] = tokens
    return streams


def compiles(data: bytes, path: str) -> bool:
    """Whether the source compiles (no code runs): a syntax error is left for a build to say
    at its line."""
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, UnicodeDecodeError, OverflowError, MemoryError):
        return False
    return True


@dataclass(frozen=True)
class LineMap:
    """Where each old line of a source went, for the lines whose tokens all went to one line."""

    moves: dict[int, int]

    def move(self, line: int) -> int | None:
        return self.moves.get(line)


def line_map(old: SourceTokens, new: SourceTokens) -> LineMap | None:
    """Each old line's new line, when the two streams are equal; None when they are not."""
    if old.digest != new.digest or len(old.lines) != len(new.lines):
        return None
    moves: dict[int, int] = {}
    split: set[int] = set()
    for before, after in zip(old.lines, new.lines, strict=True):
        if moves.setdefault(before, after) != after:
            split.add(before)
    return LineMap({line: to for line, to in moves.items() if line not in split})
