"""Which partition of the earlier build is "the same" as one of this build's.

Partitions have no names across builds: an edit renumbers them, splits one, changes its graph
or its weights. Within one method and backend, each partition of this build takes the first
unmatched earlier partition that agrees with it, asking in this order:

1. "key": the same key (nothing of it changed; a miss then means the cache lost the entry);
2. "weights": the same weight names (`blocks.3.fc.weight`, ...): what a partition reads is the
   best name it has, and it holds through edits to its graph or its weights' values. The nodes'
   source lines do not tell repeated blocks apart (every block runs the same lines);
3. "graph": the same graph, for partitions without weights (an activation between two refused
   ops), in order;
4. "position": the rest, in order (the n-th left of this build with the n-th left of the earlier).

A partition of this build that finds none is new (the earlier build made fewer there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lowerd.project.key_summary import KeySummary


@dataclass(frozen=True)
class PartitionIdentity:
    method: str
    backend: str
    key: KeySummary | None


@dataclass(frozen=True)
class Match:
    earlier: int  # the earlier partition's position in the list given
    how: str  # "key", "weights", "graph" or "position"


Agrees = Callable[[PartitionIdentity, PartitionIdentity], bool]


def _same_key(now: PartitionIdentity, before: PartitionIdentity) -> bool:
    return now.key is not None and now.key == before.key


def _same_weights(now: PartitionIdentity, before: PartitionIdentity) -> bool:
    if now.key is None or before.key is None or not now.key.tensors:
        return False
    return set(now.key.tensors) == set(before.key.tensors)


def _same_graph(now: PartitionIdentity, before: PartitionIdentity) -> bool:
    return now.key is not None and before.key is not None and now.key.graph == before.key.graph


def _anywhere(now: PartitionIdentity, before: PartitionIdentity) -> bool:
    return True


RULES: tuple[tuple[str, Agrees], ...] = (
    ("key", _same_key),
    ("weights", _same_weights),
    ("graph", _same_graph),
    ("position", _anywhere),
)


def match_partitions(
    now: Sequence[PartitionIdentity], earlier: Sequence[PartitionIdentity]
) -> dict[int, Match]:
    """Position in `now` -> its match in `earlier`; a partition with none is left out."""
    matches: dict[int, Match] = {}
    taken: set[int] = set()
    for how, agrees in RULES:
        for position, partition in enumerate(now):
            if position in matches:
                continue
            for candidate, before in enumerate(earlier):
                if (
                    candidate not in taken
                    and (before.method, before.backend) == (partition.method, partition.backend)
                    and agrees(partition, before)
                ):
                    matches[position] = Match(candidate, how)
                    taken.add(candidate)
                    break
    return matches
