"""`lowerd.Method`: one method of a program, as an entry function returns it.

The entry says what to export the way `torch.export.export(module, args, kwargs,
dynamic_shapes=...)` takes it, keyword example inputs included: a decoder exported as
optimum-executorch exports it takes `input_ids=` and `cache_position=` as keywords, and a program
exported with positional inputs has another input structure (other bytes). The old tuple forms,
`(module, args)` and `(module, args, dynamic_shapes)`, are read into the same class.

Importable without torch (`from lowerd import Method` costs no torch import): the checks that
need torch are the engine's (lowering/entry.py), when the entry has been called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any


@dataclass(frozen=True, eq=False)
class Method:
    """A module with its example inputs: `args` positional, `kwargs` by keyword, and the
    dynamic shapes torch.export takes (keyword-only, as torch.export.export has it)."""

    module: Any  # a torch.nn.Module
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    _: KW_ONLY
    dynamic_shapes: Any = None

    @property
    def has_keywords(self) -> bool:
        return bool(self.kwargs)
