"""The order and names a replay gives a program's weight placeholders (region_assembly.py
places the assembled program's weights so).

Each of edge generation's replays (`run_decompositions`: torch 2.13's
`_decompose_and_get_gm_with_new_signature_constants`) unlifts the program (`ep.module()`:
`_register_attrs_to_new_gm` assigns every buffer, then every parameter, by its target, in the
signature's order, making the submodules on their paths as it meets them), traces it with its
weights in `named_parameters()` then `named_buffers()` order (each module's own, in insertion
order, module by module in preorder) and names each placeholder from its target
(`placeholder_naming_pass`: `p_`/`b_` and the target, lower case, every other character `_`).
A program whose weights already come so (a non-strict export's) keeps them; a strict export
names a weight by the path dynamo read it through (transformers' StaticCache's
`b_static_cache_layers_0_keys` for the buffer `key_cache_0`) and may order its buffers
otherwise: the replays rename and reorder them, and so must the assembly.
"""

from __future__ import annotations

import re
from typing import Any

_PREFIXES = {"PARAMETER": "p_", "BUFFER": "b_"}
# Edge generation replays the program three times (functionalization, two decompositions); the
# order is a fixed point after one for every program seen, checked within these.
_REPLAYS = 3


class Unplaceable(Exception):
    """The replays' names would collide: their collision suffixes are not reproduced here."""


def replayed_weights(specs: list[Any]) -> list[tuple[str, str]]:
    """(the program's placeholder name, the replays' name) of each parameter and buffer input,
    in the replays' order, for the program's input specs."""
    order = [(spec.arg.name, spec.kind.name, str(spec.target)) for spec in specs]
    order = [entry for entry in order if entry[1] in _PREFIXES]
    for _ in range(_REPLAYS):
        again = _one_replay(order)
        if again == order:
            break
        order = again
    else:
        raise Unplaceable("the weights' order does not settle within edge generation's replays")
    named = [(name, _PREFIXES[kind] + _stripped(target)) for name, kind, target in order]
    replayed = [new for _, new in named]
    if len(set(replayed)) != len(replayed):
        raise Unplaceable("two weights' placeholders would be named alike")
    return named


def _one_replay(order: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The weights in named_parameters() then named_buffers() order of the unlifted module."""
    root: dict[str, Any] = {"children": {}, "PARAMETER": [], "BUFFER": []}
    for kind in ("BUFFER", "PARAMETER"):  # _register_attrs_to_new_gm's order
        for entry in order:
            if entry[1] != kind:
                continue
            *path, _ = entry[2].split(".")
            module = root
            for part in path:
                module = module["children"].setdefault(
                    part, {"children": {}, "PARAMETER": [], "BUFFER": []}
                )
            module[kind].append(entry)
    return _members(root, "PARAMETER") + _members(root, "BUFFER")


def _members(module: dict[str, Any], kind: str) -> list[tuple[str, str, str]]:
    found = list(module[kind])
    for child in module["children"].values():
        found += _members(child, kind)
    return found


def _stripped(target: str) -> str:
    """placeholder_naming_pass's `_strip_name` of a target, lower case."""
    for prefix in ("L__self___", "self_"):
        if target.startswith(prefix):
            target = target[len(prefix) :]
            break
    return re.sub(r"[^a-zA-Z0-9]", "_", target.lower())
