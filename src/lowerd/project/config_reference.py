"""docs/config-keys.md, the reference of every [tool.lowerd] key, made from the field table
(config_keys.py). `python -m lowerd.project.config_reference [PATH]` writes it;
tests/test_config_reference.py fails when the checked-in file is not what the table makes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lowerd.project.config_keys import KEYS, Key, Scope

DEFAULT_PATH = Path("docs/config-keys.md")

_WHERE = {
    Scope.PROJECT: "`[tool.lowerd]`",
    Scope.TARGET: "`[tool.lowerd.targets.<name>]`",
    Scope.BOTH: "both",
}
_BOTH = "`[tool.lowerd]` (every target's default) or `[tool.lowerd.targets.<name>]`"

_HEADER = """\
# Configuration keys

<!-- Made by `python -m lowerd.project.config_reference` from src/lowerd/project/config_keys.py;
     tests/test_config_reference.py keeps the two equal. Edit the table, not this file. -->

lowerd reads the `[tool.lowerd]` table of a `pyproject.toml`: project keys go in
`[tool.lowerd]`, target keys in `[tool.lowerd.targets.<name>]` (one table per target; dotted keys
and inline tables work too). A key marked *both* may be written in either: the `[tool.lowerd]`
value is every target's default, and a target's own value replaces it (`backend_options`,
`edge_compile_config` and `executorch_backend_config` are laid over it, option by option).

Every mistake (an unknown key, with a did-you-mean; a wrong type; an unknown name) is an error at
the line of the key at fault, with the valid values listed.

```toml
[tool.lowerd]
backends = ["xnnpack"]

[tool.lowerd.targets.vit]
entry = "models/vit.py:make"
```
"""


def reference() -> str:
    """The text of docs/config-keys.md."""
    rows = ["| key | where | takes | default |", "| --- | --- | --- | --- |"]
    rows += [
        f"| [`{key.name}`](#{key.name}) | {_WHERE[key.scope]} | {key.type} | {_default(key)} |"
        for key in KEYS
    ]
    sections = [_section(key) for key in KEYS]
    return "\n".join([_HEADER, *rows, "", *sections])


def _section(key: Key) -> str:
    where = _BOTH if key.scope is Scope.BOTH else _WHERE[key.scope]
    facts = f"*Where:* {where}. *Takes:* {key.type}. *Default:* {_default(key)}."
    return f"## `{key.name}`\n\n{facts}\n\n{key.doc}\n"


def _default(key: Key) -> str:
    if key.shown_default is not None:
        return key.shown_default
    shown = _toml(key.default)
    return f"{shown}; a target's: the `[tool.lowerd]` value" if key.scope is Scope.BOTH else shown


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return "none" if not value else f"`{json.dumps(value)}`"
    return f"`{json.dumps(value)}`"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT_PATH
    path.write_text(reference(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
