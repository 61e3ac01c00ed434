"""Which way ExecuTorch's edge generation ran for a method, as the build's result says it.

Edge generation is the stage whose cost grows with a model's depth: lowerd runs it by region
(lowering/region_edge.py: once per distinct layer structure, the program assembled from those
templates) where a field-by-field argument covers the program, else ExecuTorch's own function.
A user whose edit is slow reads here which ran and, for the stock path, the gate that refused:
`--json`, `--verbose`, `lowerd explain` and the editor's coverage diagnostic at the entry all
say it in `words`. The gate's reason is region_edge.py's (or the route's) text, kept as data:
its wording may change without a record format change. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from lowerd.project.wire import wire_field, wire_shape

EdgePath = Literal["regional", "stock"]


def _count_problem(count: int | None) -> str | None:
    return "expected a count >= 0" if count is not None and count < 0 else None


@wire_shape(computed=("words",))
@dataclass(frozen=True)
class EdgeGeneration:
    """A method's edge generation: "regional" (R regions, the layers and the rest, made from
    T templates, `reused` of them read back from the cache) or "stock" with `reason`, the gate
    that refused (the regions and templates found before it refused, 0 when it refused the
    program before cutting it). `words` is written for readers ("regional (5 regions from 2
    templates, 1 read from the cache)", "stock (2 methods)"), never read.
    """

    path: EdgePath
    regions: int = field(default=0, metadata=wire_field(check=_count_problem))
    templates: int = field(default=0, metadata=wire_field(check=_count_problem))
    reason: str | None = field(default=None, metadata=wire_field(omit_none=True))
    # Of the templates, those read back from the cache (made by an earlier build), not made.
    reused: int | None = field(
        default=None, metadata=wire_field(omit_none=True, check=_count_problem)
    )

    @classmethod
    def regional(cls, regions: int, templates: int, reused: int = 0) -> EdgeGeneration:
        return cls("regional", regions, templates, reused=reused or None)

    @classmethod
    def stock(cls, reason: str, regions: int = 0, templates: int = 0) -> EdgeGeneration:
        return cls("stock", regions, templates, reason)

    @property
    def words(self) -> str:
        if self.path == "regional":
            kept = f", {self.reused} read from the cache" if self.reused else ""
            return f"regional ({self.regions} regions from {self.templates} templates{kept})"
        return f"stock ({self.reason})" if self.reason else "stock"
