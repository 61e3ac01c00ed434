"""Sub-stages of ExecuTorch's lowering, timed by wrapping its functions in the measured process.

lowerd's progress stages (and stock's) say `partition` and `emit`; where their time goes inside
ExecuTorch is only seen from the functions ExecuTorch calls. A bench worker installs a
SubStageClock around its work: each function of HOOKS is wrapped, where ExecuTorch looks it up,
by one that charges the time spent in it to its sub-stage. Time is exclusive: a sub-stage called
inside another (legalize inside cutting, emission inside the to_executorch passes) is charged to
itself alone, so the sub-stages of a run add up to the time spent inside any of them. Each gets
wall seconds (time.perf_counter) and CPU seconds (time.process_time: on a shared, loaded machine
the CPU seconds are the comparable number) and a call count.

lowerd installs its own shortcuts over some of the same functions while it lowers
(lowering/edge_speedups.py, partition_speedups.py); they are installed after these wrappers and
call through them, so a call that a shortcut answers without ExecuTorch's function (a skipped
decomposition replay) is charged to the sub-stage around it. Bench code only: nothing in lowerd
imports it.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Hook:
    """One ExecuTorch (or torch) function timed as a sub-stage, patched where it is looked up:
    `owner` a class of `module`, or None for a module-level name."""

    substage: str
    module: str
    owner: str | None
    name: str
    # Timed as its own only when called outside every other sub-stage: edge generation's
    # decompositions and passes are, while the to_edge of XNNPACK's pattern graphs (made once
    # per process, inside the partitioner or preprocess) is charged to the one that made it.
    outermost: bool = False
    optional: bool = False  # lowerd's own function, absent from an older lowerd


_PROGRAM = "executorch.exir.program._program"
_BACKEND_API = "executorch.exir.backend.backend_api"

# In the order they run. `to_executorch` charges its own passes (weights to outputs, spec
# propagation, out variants, ...): what is left of it once memory planning, emission and
# serialization, which it calls, are charged to theirs.
HOOKS = (
    Hook(
        "decompositions",
        "torch.export.exported_program",
        "ExportedProgram",
        "run_decompositions",
        outermost=True,
    ),
    Hook("edge passes", _PROGRAM, None, "_generate_edge_program", outermost=True),
    Hook("fake program", _BACKEND_API, None, "get_fake_program"),
    Hook("partitioner", "executorch.exir.backend.partitioner", "Partitioner", "__call__"),
    Hook("cutting", _BACKEND_API, None, "_create_partitions"),
    Hook("legalize", "executorch.exir.lowered_backend_module", None, "legalize_graph"),
    # lowerd's legalize_graph without the copy (partition_speedups looks it up when installed)
    Hook("legalize", "lowerd.lowering.graph_legalize", None, "legalize_in_place", optional=True),
    Hook("preprocess", _BACKEND_API, None, "lower_all_submodules_to_backend"),
    Hook("to_executorch passes", _PROGRAM, "EdgeProgramManager", "to_executorch"),
    Hook(
        "memory planning",
        "executorch.exir.passes.memory_planning_pass",
        "MemoryPlanningPass",
        "run",
    ),
    Hook("emission", _PROGRAM, None, "emit_program"),
    Hook("serialization", _PROGRAM, None, "serialize_for_executorch"),
)
SUBSTAGES = tuple(dict.fromkeys(hook.substage for hook in HOOKS))


@dataclass
class Spent:
    wall: float = 0.0
    cpu: float = 0.0
    calls: int = 0


@dataclass
class SubStageClock:
    """Exclusive seconds per sub-stage while installed()."""

    spent: dict[str, Spent] = field(default_factory=dict)
    _stack: list[str] = field(default_factory=list)
    _since: tuple[float, float] = (0.0, 0.0)

    @contextmanager
    def installed(self) -> Iterator[SubStageClock]:
        """Every hook wrapped until exit, then ExecuTorch's functions put back."""
        restore: list[Callable[[], None]] = []
        try:
            for hook in HOOKS:
                restore.append(self._wrap(hook))
            yield self
        finally:
            for undo in reversed(restore):
                undo()

    def as_json(self) -> dict[str, dict[str, float]]:
        return {
            name: {"wall": s.wall, "cpu": s.cpu, "calls": s.calls} for name, s in self.spent.items()
        }

    def _wrap(self, hook: Hook) -> Callable[[], None]:
        try:
            module = importlib.import_module(hook.module)
        except ImportError:
            if hook.optional:
                return lambda: None
            raise
        holder: Any = getattr(module, hook.owner) if hook.owner else module
        raw = holder.__dict__[hook.name] if hook.owner else getattr(module, hook.name)
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if hook.outermost and clock._stack:
                return raw(*args, **kwargs)
            clock._enter(hook.substage)
            try:
                return raw(*args, **kwargs)
            finally:
                clock._leave()

        timed.__wrapped__ = raw  # type: ignore[attr-defined]
        setattr(holder, hook.name, timed)
        return lambda: setattr(holder, hook.name, raw)

    def _charge(self) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        if self._stack:
            spent = self.spent.setdefault(self._stack[-1], Spent())
            spent.wall += wall - self._since[0]
            spent.cpu += cpu - self._since[1]
        self._since = (wall, cpu)

    def _enter(self, substage: str) -> None:
        self._charge()
        self._stack.append(substage)
        self.spent.setdefault(substage, Spent()).calls += 1

    def _leave(self) -> None:
        self._charge()
        self._stack.pop()


@contextmanager
def timed_substages(enabled: bool | None) -> Iterator[Any]:
    """ExecuTorch's sub-stages timed in this process while the block runs (bench/substages.py),
    when enabled; the clock, or None."""
    if not enabled:
        yield None
        return
    with SubStageClock().installed() as clock:
        yield clock


@contextmanager
def lowerd_shortcuts(enabled: bool | None) -> Iterator[None]:
    """lowerd's exact shortcuts through ExecuTorch installed around the stock chain, as lowerd
    installs them around its own lowering and emission, when enabled: the chain's time with
    and without them, the bytes the same. A lowerd without the emission shortcut (an older
    checkout's, --lowerd-src) installs those it has, and so does one without edge generation
    by layer."""
    if not enabled:
        yield
        return
    from lowerd.lowering.edge_speedups import EdgeSpeedups
    from lowerd.lowering.partitioner_route import edge_speedups

    try:
        from lowerd.lowering.emit_speedups import emit_speedups
    except ImportError:
        emit_speedups = nullcontext
    try:  # lowerd's builds share provenance chains (provenance_speedups.py)
        from lowerd.lowering.provenance_speedups import provenance_shared
    except ImportError:
        provenance_shared = nullcontext
    try:  # lowerd's partitioner route generates edge programs by layer (region_edge.py)
        from lowerd.lowering.region_edge import RegionalEdge
    except ImportError:
        with edge_speedups(EdgeSpeedups(None)), emit_speedups(), provenance_shared():
            yield
        return
    with edge_speedups(EdgeSpeedups(None), RegionalEdge()), emit_speedups(), provenance_shared():
        yield
