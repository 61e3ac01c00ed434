"""A partitioner observed, not patched: ExecuTorch is handed a wrapper that delegates to it.

lowerd listens to partitioning (the reasons a backend gives for the nodes it leaves, the report
sent as soon as a method is partitioned) without touching the partitioner the user or the backend
made. ExecuTorch (exir/program/_program.py and exir/backend/backend_api.py, 1.5.1) reads a
partitioner through these only: `partitioner(program)` (Partitioner.__call__),
`ops_to_not_decompose(program)`, `transform_for_pre_decomposition(program)`, `spec`, and in its
messages `type(partitioner).__name__` and `str(partitioner)`. The wrapper delegates each to the
partitioner it wraps, and its class is named like the wrapped one, so what ExecuTorch decides and
what it says are what they would be with the partitioner itself (the bytes stay stock's); any
other attribute (XNNPACK's `delegation_spec`) reads through. The wrapper adds two things: the
partitioning runs inside `listening()`, and its result goes to `on_result` before ExecuTorch
takes it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import cache
from typing import Any, cast

from executorch.exir.backend.partitioner import Partitioner, PartitionResult

Listening = Callable[[], AbstractContextManager[object]]
OnResult = Callable[[PartitionResult], None]

# The wrapper's own attributes: never looked up on the wrapped partitioner (a copy made without
# __init__ has none of them yet, and must not recurse looking for them).
_OWN = frozenset({"_inner", "_listening", "_on_result"})


class ObservedPartitioner(Partitioner):  # type: ignore[misc]  # ExecuTorch is untyped
    """`inner` as ExecuTorch sees it, with its partitioning listened to."""

    def __init__(self, inner: Partitioner, listening: Listening, on_result: OnResult | None):
        # Partitioner.__init__ would keep a spec of the wrapper's own: `spec` reads inner's.
        self._inner = inner
        self._listening = listening
        self._on_result = on_result

    @property
    def inner(self) -> Partitioner:
        return self._inner

    def __call__(self, exported_program: Any) -> PartitionResult:
        # As stock calls it: through the partitioner's own __call__, which one may override.
        return self._observed(lambda: self._inner(exported_program))

    def partition(self, exported_program: Any) -> PartitionResult:
        return self._observed(lambda: self._inner.partition(exported_program))

    def _observed(self, partition: Callable[[], PartitionResult]) -> PartitionResult:
        with self._listening():
            result = partition()
        if self._on_result is not None:
            self._on_result(result)
        return result

    @property
    def spec(self) -> Any:
        return self._inner.spec

    def ops_to_not_decompose(self, ep: Any) -> Any:
        return self._inner.ops_to_not_decompose(ep)

    def transform_for_pre_decomposition(self, exported_program: Any) -> Any:
        return self._inner.transform_for_pre_decomposition(exported_program)

    def __getattr__(self, name: str) -> Any:
        if name in _OWN or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return repr(self._inner)


def observe(
    partitioner: Partitioner, listening: Listening, on_result: OnResult | None = None
) -> ObservedPartitioner:
    """`partitioner` wrapped: partitioning inside `listening()`, its result given to
    `on_result`."""
    kind: type = type(partitioner)
    return _observing(kind)(partitioner, listening, on_result)


@cache
def _observing(kind: type) -> type[ObservedPartitioner]:
    """ObservedPartitioner under the wrapped class's name: ExecuTorch names a partitioner by
    `__class__.__name__` in what it reports (a preserved op it refuses, for one)."""
    namespace = {"__qualname__": kind.__qualname__, "__doc__": ObservedPartitioner.__doc__}
    return cast(type[ObservedPartitioner], type(kind.__name__, (ObservedPartitioner,), namespace))
