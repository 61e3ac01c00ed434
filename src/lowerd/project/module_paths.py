"""Module paths as a reader takes them in: the paths a refusal repeats over, collapsed to brace
patterns. No torch here: the language server shows them too."""

from __future__ import annotations

from collections.abc import Iterable


def collapse_module_paths(paths: Iterable[str | None]) -> str | None:
    """Module paths as few brace patterns, exact (each pattern expands to paths of the list
    only): `model.layers.{0..3}.{input_layernorm,post_attention_layernorm}, model.norm`.

    Patterns of one length that differ in one component merge, repeatedly; a merge of two
    exact patterns that differ in one place is exact. The root ("") and unknown paths (None) are
    left out: the root's ops are the user's own forward, which their line already names.
    """
    patterns = [[[part] for part in path.split(".")] for path in dict.fromkeys(paths) if path]
    merged = True
    while merged:
        merged = False
        for i, first in enumerate(patterns):
            for j in range(i + 1, len(patterns)):
                at = _differs_in_one(first, patterns[j])
                if at is not None:
                    first[at] += [p for p in patterns[j][at] if p not in first[at]]
                    del patterns[j]
                    merged = True
                    break
            if merged:
                break
    if not patterns:
        return None
    return ", ".join(".".join(_alternatives(parts) for parts in p) for p in patterns)


def _differs_in_one(a: list[list[str]], b: list[list[str]]) -> int | None:
    if len(a) != len(b):
        return None
    differing = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if set(x) != set(y)]
    return differing[0] if len(differing) == 1 else None


def _alternatives(parts: list[str]) -> str:
    if len(parts) == 1:
        return parts[0]
    if all(part.isdigit() for part in parts):
        return "{" + _index_ranges(sorted(int(part) for part in parts)) + "}"
    return "{" + ",".join(parts) + "}"


def _index_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 3, 5] -> "0..3,5"."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(
        f"{run[0]}..{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs
    )
