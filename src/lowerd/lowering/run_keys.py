"""How the memos of FakeTensor runs spell what a run reads and what it may change (dtype_checks.py,
delegate_runs.py): both answer a run from an earlier run with the same key, and both keep a run
only when it left its ShapeEnv as it found it."""

from __future__ import annotations

from typing import Any

import torch

# Constants up to this many elements are spelled in a key by their bytes (the scalars export
# lifts are one element); a run reading a larger one is run.
_CONSTANT_ELEMENTS = 64


# The symbolic numbers a run reads as values or sizes: each spelled by its expression.
SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


class Unspelled(Exception):
    """Something a key does not spell: the run runs."""


def literal(value: Any) -> Any:
    """A plain argument as a key holds it: its type beside it (1 and True and 1.0 differ), a float
    by its hex (0.0 and -0.0 differ)."""
    if value is None or type(value) in (bool, int, str):
        return (type(value).__name__, value)
    if type(value) is float:
        return ("float", value.hex())
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return (type(value).__name__, value)
    raise Unspelled(f"an argument of {type(value).__name__}")


def small_constant(tensor: torch.Tensor) -> tuple[Any, ...]:
    """A fake value's constant (a lifted scalar's): the fake mode may run the real op on it,
    so its bytes are part of what the run reads; only small ones are spelled."""
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter):
        # a FakeTensor's constant can be fake itself: reading its values would make unbacked
        # symbols in its ShapeEnv
        raise Unspelled("a constant that is not a plain tensor")
    if tensor.numel() > _CONSTANT_ELEMENTS or tensor.is_quantized or tensor.layout != torch.strided:
        raise Unspelled("a large constant")
    flat = tensor.detach().reshape(-1).contiguous()
    return (tensor.dtype, tuple(tensor.shape), tuple(flat.view(torch.uint8).tolist()))


def shape_env_state(shape_env: Any) -> tuple[Any, ...] | None:
    """What a later step can read of a ShapeEnv: its symbols and their ranges (a fresh unbacked
    symbol adds one), replacements, guards, axioms, deferred runtime assertions and symbol
    counters; None without one."""
    if shape_env is None:
        return None
    return (
        sorted((str(s), str(r)) for s, r in shape_env.var_to_range.items()),
        sorted((str(s), str(e)) for s, e in shape_env.replacements.items()),
        len(shape_env.guards),
        len(shape_env.axioms),
        shape_env.num_deferred_runtime_asserts,
        shape_env.unbacked_symint_counter,
        shape_env.unbacked_symfloat_counter,
        len(shape_env.pending_fresh_unbacked_symbols),
        len(shape_env.divisible),
        len(shape_env.size_like),
    )
