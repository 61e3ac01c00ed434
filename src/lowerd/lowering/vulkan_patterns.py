"""Vulkan's fusion-pattern graphs, made once per process instead of once per partition.

The Vulkan partitioner (to find fusable subgraphs) and `VulkanBackend.preprocess` (FusePatternsPass,
for every partition) ask the pattern registry for its pattern graphs: each call exports the
reference RoPE modules afresh, about 2 s, so a model with N Vulkan partitions pays it 2N + 1
times. The functions that make them (`get_rope_graphs`, `get_hf_rope_graphs`) take no argument
and are pure: their graphs depend on the code alone. ExecuTorch means them to be made once — both
carry `@lru_cache` — but the cache sits above `@register_pattern_graph`, so the registry holds and
calls the uncached function.

While a build lowers, each registered function is replaced by one that makes its graphs on the
first call and returns the same graphs after. Those graphs are only matched against (torch's
SubgraphMatcher reads a pattern, it never changes one), so what the partitioner finds and what
preprocess fuses are what they would be: tests/test_fidelity.py and tests/test_rebase.py compare
Vulkan programs with stock's bytes. Only with the torch and ExecuTorch versions this was checked
against; otherwise every call makes its graphs, as ExecuTorch does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lowerd.lowering.edge_speedups import validated_versions

_REGISTRY = "executorch.backends.vulkan.patterns.pattern_registry"
# Each pattern function -> the graphs it made, for this process.
_MADE: dict[Callable[[], Any], list[Any]] = {}


@contextmanager
def pattern_graphs_made_once() -> Iterator[None]:
    """Until exit, each registered pattern function makes its graphs once per process. Nothing
    is imported here: a build that does not use Vulkan has not loaded its registry."""
    registry = sys.modules.get(_REGISTRY)
    if registry is None or not validated_versions():
        yield
        return
    entries = [e for e in registry.fusable_patterns.values() if e.get_graphs_fn is not None]
    originals = [entry.get_graphs_fn for entry in entries]
    for entry, make in zip(entries, originals, strict=True):
        entry.get_graphs_fn = _made_once(make)
    try:
        yield
    finally:
        for entry, make in zip(entries, originals, strict=True):
            entry.get_graphs_fn = make


def _made_once(make: Callable[[], Any]) -> Callable[[], list[Any]]:
    def graphs() -> list[Any]:
        if make not in _MADE:
            _MADE[make] = list(make())
        return list(_MADE[make])  # a new list each time, as the function returns one

    return graphs
