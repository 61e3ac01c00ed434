"""Which module made each op, and coverage over the module tree.

torch.export records, per node, the modules whose forward was running when the op was traced:
meta["nn_module_stack"], outermost first, each value (fully qualified path, class). The path is
the attribute path from the exported module (`model.model.layers.0.input_layernorm` when the
user's wrapper holds a transformers model as `self.model`), so it is kept as is: it is what
`module.get_submodule(path)` finds.

Coverage is summed over each module's subtree, then over repeated layers: the modules at the
same place under indices of one container (`layers.0`, `layers.1`, …) and of one class are one
row, `model.model.layers.*.mlp`, so a 32-layer model reads like a 2-layer one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lowerd.project.report_model import ModuleCoverage

ModuleStack = list[tuple[str, str]]  # (path, class short name), outermost first; root path ""

_CALL_SUFFIX = re.compile(r"@\d+$")  # export marks a module's second call as `path@1`


def module_stack(meta: Mapping[str, Any]) -> ModuleStack:
    stack = meta.get("nn_module_stack") or {}
    found: ModuleStack = []
    for value in stack.values():
        path, cls = value[0], value[1]
        found.append((_clean_path(str(path)), _short_class(cls)))
    return found


def module_of(meta: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(path, class) of the innermost module whose forward made the op; (None, None) if unknown."""
    stack = module_stack(meta)
    return stack[-1] if stack else (None, None)


def qualified_class(meta: Mapping[str, Any]) -> str | None:
    """`transformers.models.llama.modeling_llama.LlamaRMSNorm`: the innermost module's class as
    export recorded it, to find its source by."""
    stack = meta.get("nn_module_stack") or {}
    if not stack:
        return None
    cls = list(stack.values())[-1][1]
    return cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"


def _clean_path(path: str) -> str:
    return ".".join(_CALL_SUFFIX.sub("", part) for part in path.split(".")) if path else ""


def _short_class(cls: Any) -> str:
    name = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
    return name.rsplit(".", 1)[-1]


@dataclass
class _Row:  # one concrete module path
    path: str
    module_class: str | None
    ops: int = 0
    ops_delegated: int = 0


# A level of a row's key: the path component, or "*" for an index, with the class there.
_Level = tuple[str, str | None]


def module_coverage(ops: Iterable[tuple[ModuleStack, bool]]) -> list[ModuleCoverage]:
    """Coverage per module subtree, repeated layers merged, parents before children.

    `ops`: per op of the method (bookkeeping left out), its module stack and whether it is
    delegated. An op with no stack counts at the root only.
    """
    concrete: dict[str, _Row] = {"": _Row("", None)}
    for stack, delegated in ops:
        paths: dict[str, str | None] = dict(stack)
        if "" not in paths:
            paths = {"": None, **paths}
        for path, cls in paths.items():
            row = concrete.setdefault(path, _Row(path, cls))
            row.module_class = row.module_class or cls
            row.ops += 1
            row.ops_delegated += int(delegated)
    classes = {path: row.module_class for path, row in concrete.items()}

    merged: dict[tuple[_Level, ...], ModuleCoverage] = {}
    parts_seen: dict[tuple[_Level, ...], list[set[str]]] = {}
    for path, row in concrete.items():  # in the order the ops first reached each module
        key = _key(path, classes)
        total = merged.setdefault(key, ModuleCoverage(path, row.module_class, 0, 0, instances=0))
        total.ops += row.ops
        total.ops_delegated += row.ops_delegated
        total.instances += 1
        seen = parts_seen.setdefault(key, [set() for _ in key])
        for level, part in enumerate(path.split(".") if path else []):
            seen[level].add(part)
    for key, total in merged.items():
        # "*" where several indices merged; a lone index stays as it is (`layers.0`).
        total.path = ".".join(
            "*" if len(parts) > 1 else next(iter(parts)) for parts in parts_seen[key]
        )
    first_seen = {key: position for position, key in enumerate(merged)}
    return [merged[key] for key in sorted(merged, key=lambda k: _tree_order(k, first_seen))]


def _key(path: str, classes: Mapping[str, str | None]) -> tuple[_Level, ...]:
    """Per level, the component (an index as "*") and the class of the module there: indices of
    modules of one class merge, a Sequential's Linear and ReLU do not."""
    parts = path.split(".") if path else []
    return tuple(
        ("*" if part.isdigit() else part, classes.get(".".join(parts[: level + 1])))
        for level, part in enumerate(parts)
    )


def _tree_order(
    key: tuple[_Level, ...], first_seen: Mapping[tuple[_Level, ...], int]
) -> tuple[int, ...]:
    """Depth first, siblings in the order the graph first reached them."""
    return tuple(first_seen.get(key[:depth], -1) for depth in range(1, len(key) + 1))
