"""A symbolic size of a dynamic program (`s0`, `4*s0`) as plain data and back, for the region
template store (template_store.py): a template of a program with a dynamic sequence holds its
sizes in the program's backed symbols, and an entry read back in a later build must hold the
same expressions in that build's ShapeEnv.

An expression is written as its sympy tree: integers, the program's backed symbols by name, and
the few operations torch's symbolic sizes are made of (Add, Mul, Pow, FloorDiv, PythonMod, Mod,
Max, Min). Anything else (an unbacked symbol, a rational, another function) is not written: the
template is not stored. Read back, each symbol is the ShapeEnv's own Symbol object of that name
(sympy compares symbols by name and assumptions: a new Symbol would not be the same), each
operation is rebuilt by its class, and the result must write as stored: sympy's canonical form
is a function of the expression, so an entry that rebuilds to another tree (hand-made, or from
another sympy) is unreadable, never a different size. A name means the same symbol in both
builds because the template's key holds `symbol_facts`: each backed symbol's name, sources,
range, replacement and hint.

The SymInt is made as fake propagation makes one: a SymNode of the expression in the ShapeEnv,
its hint the expression at the symbols' hints (what the ops on hints compute).
"""

from __future__ import annotations

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
}


def written(size: torch.SymInt) -> list[Any]:
    """The size's expression as plain data; NotWritable unless every symbol is backed."""
    node = size.node
    backed = node.shape_env.backed_var_to_val
    if node.expr.is_Integer:  # a SymInt holding a constant: not argued, never stored
        raise NotWritable(f"a constant SymInt {node.expr}")
    return _tree(node.expr, backed)


def _tree(expr: Any, backed: dict[Any, Any]) -> list[Any]:
    if isinstance(expr, sympy.Integer):
        return ["int", int(expr)]
    if isinstance(expr, sympy.Symbol):
        if expr not in backed:
            raise NotWritable(f"the symbol {expr} is not backed")
        return ["symbol", expr.name]
    for name, kind in _OPERATIONS.items():
        if type(expr) is kind:
            return [name, [_tree(arg, backed) for arg in expr.args]]
    raise NotWritable(f"a size of {type(expr).__name__}: {expr}")


def read(plain: Any, shape_env: Any) -> torch.SymInt:
    """The SymInt the plain form writes, in `shape_env`; NotReadable for anything else."""
    from torch.fx.experimental.sym_node import SymNode

    if shape_env is None:
        raise NotReadable("a symbolic size in a program without symbols")
    symbols = {symbol.name: symbol for symbol in shape_env.backed_var_to_val}
    expr = _rebuilt(plain, symbols)
    if expr.is_Integer or _tree(expr, shape_env.backed_var_to_val) != plain:
        raise NotReadable(f"{plain!r} does not rebuild as written")
    hint = expr.xreplace(shape_env.backed_var_to_val)
    if not isinstance(hint, sympy.Integer):
        raise NotReadable(f"{expr} has no integer hint")
    size: torch.SymInt = torch.SymInt(SymNode(expr, shape_env, int, int(hint)))  # type: ignore[no-untyped-call]
    return size


def _rebuilt(plain: Any, symbols: dict[str, Any]) -> Any:
    if type(plain) is not list or len(plain) != 2 or type(plain[0]) is not str:
        raise NotReadable(f"a size {plain!r}")
    tag, payload = plain
    if tag == "int" and type(payload) is int:
        return sympy.Integer(payload)
    if tag == "symbol" and type(payload) is str:
        if payload not in symbols:
            raise NotReadable(f"no backed symbol {payload}")
        return symbols[payload]
    kind = _OPERATIONS.get(tag)
    if kind is None or type(payload) is not list:
        raise NotReadable(f"a size operation {tag!r}")
    return kind(*(_rebuilt(arg, symbols) for arg in payload))


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
