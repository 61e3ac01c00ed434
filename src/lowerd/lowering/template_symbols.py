"""A region template's unbacked symbols across builds, for the template store (template_store.py).

A layer of optimum's recipe reads its start position with `.item()`: export binds an unbacked
symbol there (`u0`), and the template's replays bind fresh ones of their own (`u32`), which the
runtime assertions of update_cache bound (`u32 >= 0`, `u32 < 8`). An unbacked symbol's name is a
number its ShapeEnv handed out in order: it means nothing in another build. So a template's
symbols are written by what they are:

- a symbol its region binds (export's) by its place among the region's bindings
  (region_cut.unbacked_symbols), read back as the symbol the reading region binds at that place
  (the structure in the template's key places the bindings alike); the names a runtime
  assertion's message gives are renamed the same way, and a message naming any other symbol is
  not written;
- a symbol a replay made (none of the program's nodes binds it) by its order of first
  appearance, with the range and size-likeness the ShapeEnv gave it; read back as a fresh
  unbacked symbol of the reading program's ShapeEnv with them, as the template's own replay
  would have made it: only its number differs, as a copy's does (region_assembly.py's argument:
  read by no byte);
- a symbol another region binds is not written: the template is not stored.

`unbacked_bindings` (the symbols a node binds, each at the path in its value) is written with
the path of a plain SymInt value alone (`()`): a gate of region_edge refuses the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy  # type: ignore[import-untyped]

from lowerd.lowering import size_expressions
from lowerd.lowering.region_assembly import fresh_unbacked
from lowerd.lowering.region_cut import ASSERTION, UNBACKED, Region, unbacked_symbols
from lowerd.lowering.size_expressions import NotReadable, NotWritable


@dataclass
class Written:
    """The template's symbols as it is written: its region's, and the replays' fresh ones in
    order of first appearance."""

    bound: list[Any]
    elsewhere: set[Any]  # bound by the program's other nodes
    ranges: dict[Any, Any]  # the ShapeEnv's var_to_range
    size_like: set[Any]
    fresh: list[Any] = field(default_factory=list)

    @classmethod
    def of(cls, program: Any, region: Region, shape_env: Any) -> Written:
        bound = unbacked_symbols(region)
        elsewhere = {
            symbol
            for node in program.graph.nodes
            for symbol in node.meta.get("unbacked_bindings") or {}
        } - set(bound)
        if shape_env is None:
            return cls(bound, elsewhere, {}, set())
        return cls(bound, elsewhere, shape_env.var_to_range, set(shape_env.size_like))

    @property
    def unbacked(self) -> size_expressions.Unbacked:
        return size_expressions.Unbacked(write=self.payload)

    def payload(self, symbol: Any) -> list[Any]:
        if symbol in self.bound:
            return ["bound", self.bound.index(symbol)]
        if symbol in self.elsewhere or symbol not in self.ranges:
            raise NotWritable(f"the unbacked symbol {symbol} is not its region's")
        if symbol not in self.fresh:
            self.fresh.append(symbol)
        return ["fresh", self.fresh.index(symbol)]

    def facts(self) -> list[list[Any]]:
        """Each fresh symbol's range and size-likeness, in the order their payloads name them."""
        return [
            [_limit(self.ranges[s].lower), _limit(self.ranges[s].upper), s in self.size_like]
            for s in self.fresh
        ]

    def names(self) -> list[str]:
        return [str(symbol) for symbol in self.bound]

    def message(self, text: str) -> str:
        """A runtime assertion's message, written as it is where it names only the region's."""
        found = ASSERTION.match(text)
        named = set(UNBACKED.findall(found.group(1))) if found else set()
        if not named <= set(self.names()):
            raise NotWritable(f"an assertion naming {sorted(named)}")
        return text

    def bindings(self, value: Any) -> list[Any]:
        if type(value) is not dict or any(path != () for path in value.values()):
            raise NotWritable(f"unbacked_bindings {value!r}")
        return [self.payload(symbol) for symbol in value]


@dataclass
class Reading:
    """The symbols a template is read back with, for `region` of the reading program."""

    bound: list[Any]
    fresh: list[Any]
    renames: dict[str, str]

    @classmethod
    def of(cls, shape_env: Any, region: Region, names: Any, facts: Any) -> Reading:
        bound = unbacked_symbols(region)
        if type(names) is not list or len(names) != len(bound):
            raise NotReadable(f"{names!r} for the {len(bound)} symbols {region.key} binds")
        if type(facts) is not list or (facts and shape_env is None):
            raise NotReadable(f"fresh symbols {facts!r}")
        fresh = [fresh_unbacked(shape_env, *_range(fact)) for fact in facts]
        renames = {str(name): str(symbol) for name, symbol in zip(names, bound, strict=True)}
        return cls(bound, fresh, renames)

    @property
    def unbacked(self) -> size_expressions.Unbacked:
        return size_expressions.Unbacked(read=self.symbol)

    def symbol(self, payload: Any) -> Any:
        if type(payload) is list and len(payload) == 2 and type(payload[1]) is int:
            tag, index = payload
            symbols = {"bound": self.bound, "fresh": self.fresh}.get(tag, [])
            if 0 <= index < len(symbols):
                return symbols[index]
        raise NotReadable(f"an unbacked symbol {payload!r}")

    def message(self, text: Any) -> Any:
        found = ASSERTION.match(text) if type(text) is str else None
        if found is None:
            return text
        expression = UNBACKED.sub(lambda m: self._renamed(m.group(0)), found.group(1))
        return f"Runtime assertion failed for expression {expression} on node '{found.group(2)}'"

    def _renamed(self, name: str) -> str:
        if name not in self.renames:
            raise NotReadable(f"an assertion naming {name}, which the region does not bind")
        return self.renames[name]

    def bindings(self, plain: Any) -> dict[Any, Any]:
        if type(plain) is not list:
            raise NotReadable(f"unbacked_bindings {plain!r}")
        return {self.symbol(payload): () for payload in plain}


def _limit(value: Any) -> Any:
    from torch.utils._sympy.numbers import int_oo

    if value == int_oo or value == -int_oo:
        return str(value)
    if isinstance(value, sympy.Integer):
        return int(value)
    raise NotWritable(f"a range limit {value!r}")


def _range(fact: Any) -> tuple[Any, bool]:
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges

    limits = {str(int_oo): int_oo, str(-int_oo): -int_oo}
    if type(fact) is not list or len(fact) != 3 or type(fact[2]) is not bool:
        raise NotReadable(f"a fresh symbol {fact!r}")
    lower, upper = (
        sympy.Integer(limit) if type(limit) is int else limits.get(limit) for limit in fact[:2]
    )
    if lower is None or upper is None or lower > upper:
        raise NotReadable(f"a range {fact[:2]!r}")
    return ValueRanges(lower, upper), fact[2]
