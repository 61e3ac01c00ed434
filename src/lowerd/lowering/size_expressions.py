"""A symbolic size of a dynamic program (`s0`, `4*s0`) as plain data and back, for the region
template store (template_store.py): a template of a program with a dynamic sequence holds its
sizes in the program's backed symbols, and an entry read back in a later build must hold the
same expressions in that build's ShapeEnv.

An expression is written as its sympy tree: integers, the program's backed symbols by name, and
the few operations torch's symbolic sizes are made of (Add, Mul, Pow, FloorDiv, PythonMod, Mod,
Max, Min; a runtime assertion's SymBool, `u0 >= 0`, as its relation). Anything else (a
rational, another function) is not written: the template is not stored. Read back, each symbol
is the ShapeEnv's own Symbol object of that name (sympy compares symbols by name and
assumptions: a new Symbol would not be the same), each operation is rebuilt by its class, and
the result must write as stored: sympy's canonical form is a function of the expression, so an
entry that rebuilds to another tree (hand-made, or from another sympy) is unreadable, never a
different size. A name means the same symbol in both builds because the template's key holds
`symbol_facts`: each backed symbol's name, sources, range, replacement and hint.

An unbacked symbol (an `.item()`'s `u0`) has no name that means the same in another build: the
caller says what each is (`Unbacked`: the plain payload written for a symbol, the symbol a
payload reads as), and its leaf holds that payload.

The SymInt or SymBool is made as fake propagation makes one: a SymNode of the expression in the
ShapeEnv, its hint the expression at the symbols' hints (what the ops on hints compute), none
where an unbacked symbol is in it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy  # type: ignore[import-untyped]
import torch
from torch.utils._sympy.functions import FloorDiv, Max, Min, Mod, PythonMod


class NotWritable(Exception):
    """A size the plain form does not hold exactly."""


class NotReadable(Exception):
    """A plain form that does not rebuild to a size of this ShapeEnv."""


_OPERATIONS: dict[str, Any] = {
    "add": sympy.Add,
    "mul": sympy.Mul,
    "pow": sympy.Pow,
    "floordiv": FloorDiv,
    "pythonmod": PythonMod,
    "mod": Mod,
    "max": Max,
    "min": Min,
    # a runtime assertion's relations
    "ge": sympy.GreaterThan,
    "gt": sympy.StrictGreaterThan,
    "le": sympy.LessThan,
    "lt": sympy.StrictLessThan,
    "eq": sympy.Equality,
    "ne": sympy.Unequality,
}


@dataclass(frozen=True)
class Unbacked:
    """What the caller makes of unbacked symbols: `write` gives a symbol's plain payload (or
    raises NotWritable), `read` the symbol a payload stands for (or raises NotReadable)."""

    write: Callable[[Any], Any] | None = None
    read: Callable[[Any], Any] | None = None


NO_UNBACKED = Unbacked()


def written(value: torch.SymInt | torch.SymBool, unbacked: Unbacked = NO_UNBACKED) -> list[Any]:
    """The value's expression as plain data; NotWritable unless each symbol is backed or
    `unbacked` writes it."""
    node = value.node
    if node.expr.is_Integer or node.expr.is_Boolean:  # a constant: not argued, never stored
        raise NotWritable(f"a constant {type(value).__name__} {node.expr}")
    return _tree(node.expr, node.shape_env.backed_var_to_val, unbacked.write)


def _tree(expr: Any, backed: dict[Any, Any], unbacked: Callable[[Any], Any] | None) -> list[Any]:
    if isinstance(expr, sympy.Integer):
        return ["int", int(expr)]
    if isinstance(expr, sympy.Symbol):
        if expr in backed:
            return ["symbol", expr.name]
        if unbacked is None:
            raise NotWritable(f"the symbol {expr} is not backed")
        return ["unbacked", unbacked(expr)]
    for name, kind in _OPERATIONS.items():
        if type(expr) is kind:
            return [name, [_tree(arg, backed, unbacked) for arg in expr.args]]
    raise NotWritable(f"a size of {type(expr).__name__}: {expr}")


def read(plain: Any, shape_env: Any, unbacked: Unbacked = NO_UNBACKED) -> Any:
    """The SymInt (a relation's SymBool) the plain form writes, in `shape_env`; NotReadable
    for anything else."""
    from torch.fx.experimental.sym_node import SymNode

    if shape_env is None:
        raise NotReadable("a symbolic size in a program without symbols")
    symbols = {symbol.name: symbol for symbol in shape_env.backed_var_to_val}
    payloads: dict[Any, Any] = {}
    expr = _rebuilt(plain, symbols, unbacked.read, payloads)
    constant = expr.is_Integer or expr.is_Boolean
    if constant or _tree(expr, shape_env.backed_var_to_val, payloads.__getitem__) != plain:
        raise NotReadable(f"{plain!r} does not rebuild as written")
    kind, pytype = (torch.SymBool, bool) if expr.is_Relational else (torch.SymInt, int)
    hint = None
    if not payloads:  # an unbacked symbol has no hint, nor has what holds one
        hint = expr.xreplace(shape_env.backed_var_to_val)
        if not isinstance(hint, (sympy.Integer, sympy.logic.boolalg.BooleanAtom)):
            raise NotReadable(f"{expr} has no hint")
        hint = pytype(hint)
    return kind(SymNode(expr, shape_env, pytype, hint))


def _rebuilt(
    plain: Any,
    symbols: dict[str, Any],
    unbacked: Callable[[Any], Any] | None,
    payloads: dict[Any, Any],
) -> Any:
    if type(plain) is not list or len(plain) != 2 or type(plain[0]) is not str:
        raise NotReadable(f"a size {plain!r}")
    tag, payload = plain
    if tag == "int" and type(payload) is int:
        return sympy.Integer(payload)
    if tag == "symbol" and type(payload) is str:
        if payload not in symbols:
            raise NotReadable(f"no backed symbol {payload}")
        return symbols[payload]
    if tag == "unbacked" and unbacked is not None:
        symbol = unbacked(payload)
        if payloads.setdefault(symbol, payload) != payload:
            raise NotReadable(f"{symbol} read from two payloads")
        return symbol
    kind = _OPERATIONS.get(tag)
    if kind is None or type(payload) is not list:
        raise NotReadable(f"a size operation {tag!r}")
    return kind(*(_rebuilt(arg, symbols, unbacked, payloads) for arg in payload))


def symbol_facts(shape_env: Any) -> list[tuple[str, ...]]:
    """What names a backed symbol across builds: per symbol, by name, where export took it from
    (its sources), its range, its replacement and its hint. Two programs with the same facts
    mean the same size by the same name."""
    if shape_env is None:
        return []
    return [
        (
            symbol.name,
            str([source.name for source in shape_env.var_to_sources.get(symbol, [])]),
            str(shape_env.var_to_range.get(symbol)),
            str(shape_env.replacements.get(symbol)),
            str(hint),
        )
        for symbol, hint in sorted(shape_env.backed_var_to_val.items(), key=_by_name)
    ]


def _by_name(item: tuple[Any, Any]) -> str:
    return str(item[0].name)
