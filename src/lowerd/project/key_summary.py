"""A partition's cache key as a build record keeps it: small enough to store for every partition,
enough to say which input changed when the next build misses the cache.

The fields are PartitionKeyDetails' (lowering/partition_key.py), so `diff` names the same inputs
its `diff` does: the small ones kept as they are, the graph and the other large encodings as
digests of themselves, and the weights as one digest per tensor so that a miss can name them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

# Hex digits kept of a field's or a tensor's digest: enough to tell two builds' apart.
DIGEST_CHARS = 16


@dataclass(frozen=True)
class KeySummary:
    format_version: int
    backend: str
    naming: str
    torch_version: str
    executorch_version: str
    compile_specs: str
    graph: str
    submodules: str
    signature: str
    range_constraints: str
    # the lifted parameter, buffer or constant's name (`blocks.3.fc.weight`) -> its digest
    tensors: dict[str, str] = field(default_factory=dict)

    def diff(self, other: KeySummary) -> list[str]:
        """Names of the inputs that differ, as PartitionKeyDetails.diff names them."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]

    def changed_weights(self, earlier: KeySummary) -> list[str]:
        """The tensors whose contents changed since `earlier`, then those it did not have, then
        those it had that are gone, each in the partition's order."""
        before = earlier.tensors
        changed = [n for n, d in self.tensors.items() if n in before and d != before[n]]
        added = [n for n in self.tensors if n not in before]
        removed = [n for n in before if n not in self.tensors]
        return changed + added + removed
