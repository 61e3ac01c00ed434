"""Text that lowerd shows a user, with what a terminal or an editor would act on written out.

A message quotes what the user's files gave (a path, a name, a value): a NUL, an escape sequence
(`\x1b[2J` clears a terminal), a carriage return (overwrites the line) or a bidirectional
override (shows text in another order than it reads) would be printed raw. Each is written as its
Python escape instead (`\x00`, `\x1b`, `\u202e`); newlines and tabs stay, as messages use them.
Every error goes through here once: LowerdError and ErrorInfo (project/errors.py, result.py).
"""

from __future__ import annotations

import re

# C0 and C1 controls but tab and newline, DEL, bidirectional marks, embeddings, overrides and
# isolates, and the line and paragraph separators.
_ACTED_ON = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with each character a terminal or an editor would act on escaped; idempotent."""
    return _ACTED_ON.sub(lambda found: found.group().encode("unicode_escape").decode(), text)
