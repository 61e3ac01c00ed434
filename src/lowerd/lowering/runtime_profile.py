"""A method's host latency from the runtime's own profiling events (ETDump).

With ETDump on, the runtime records every run of a method ("Method::execute") and, inside it,
each instruction of its chain: a delegate call ("DELEGATE_CALL") or a kernel the portable
library runs ("native_call_cumsum.out"), each with its instruction id. The program's execution
plan says what each instruction is (which delegate, which operator), so each event becomes a
part: "XNNPACK #1" (the first XNNPACK delegate call of the method's chain) or "aten.cumsum" (the
CPU op, its calls in one run summed). Times are the runtime's clock, nanoseconds, given in ms.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lowerd.project.backends import backend_by_details_class
from lowerd.project.verification import PartLatency

_NS_PER_MS = 1e6
_TOTAL = "Method::execute"
_DELEGATE = "DELEGATE_CALL"
_KERNEL = "native_call_"


@dataclass(frozen=True)
class MethodProfile:
    """The timed runs' totals (ms, each run) and the parts, slowest first."""

    totals_ms: tuple[float, ...]
    parts: tuple[PartLatency, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.totals_ms)

    @property
    def p90_ms(self) -> float:
        ordered = sorted(self.totals_ms)
        return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Instruction:
    """What one instruction of a method's chain is, in the report's words."""

    name: str  # "XNNPACK #1", "aten.cumsum"
    kind: str  # "delegate" or "cpu"


def method_instructions(pte: bytes) -> dict[str, list[Instruction | None]]:
    """Each method's chain, instruction by instruction (None: neither a delegate nor a kernel
    call: a move, a jump, a free)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = _program_of(deserialize_pte_binary(pte))
    return {plan.name: _chain(plan) for plan in program.execution_plan}


def profile_of(
    etdump: Path, instructions: Sequence[Instruction | None], warmup: int
) -> MethodProfile:
    """The profile of one method's runs in an ETDump written after warmup + timed runs."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    dump = deserialize_from_etdump_flatcc(etdump.read_bytes())
    runs = [
        events for events in (_profile_events(run) for run in dump.run_data) if _TOTAL in events
    ]
    timed = runs[warmup:] or runs
    totals = tuple(sum(_ms(e) for e in run[_TOTAL]) for run in timed)
    return MethodProfile(totals, _parts(timed, instructions))


def _profile_events(run: Any) -> dict[str, list[Any]]:
    """A run's own profiling events by name (a delegate's inner events left out)."""
    named: dict[str, list[Any]] = {}
    for event in run.events or ():
        profile = event.profile_event
        if profile is None or not profile.name or _inside_delegate(profile):
            continue
        named.setdefault(profile.name, []).append(profile)
    return named


def _inside_delegate(profile: Any) -> bool:
    ids = (profile.delegate_debug_id_int, profile.delegate_debug_id_str)
    return any(i not in (None, -1, "") for i in ids)


def _parts(
    runs: Sequence[Mapping[str, list[Any]]], instructions: Sequence[Instruction | None]
) -> tuple[PartLatency, ...]:
    """Each part's median over the runs of its time in a run (a CPU op's calls summed)."""
    per_run: dict[tuple[str, str], list[float]] = {}
    calls: dict[tuple[str, str], int] = {}
    for index, run in enumerate(runs):
        for name, events in run.items():
            if name != _DELEGATE and not name.startswith(_KERNEL):
                continue
            for event in events:
                part = _instruction(instructions, event.instruction_id)
                if part is None:
                    continue
                key = (part.name, part.kind)
                times = per_run.setdefault(key, [0.0] * len(runs))
                times[index] += _ms(event)
                if index == 0:
                    calls[key] = calls.get(key, 0) + 1
    parts = [
        PartLatency(
            name,
            "delegate" if kind == "delegate" else "cpu",
            statistics.median(times),
            calls.get((name, kind), 1),
        )  # fmt: skip
        for (name, kind), times in per_run.items()
    ]
    return tuple(sorted(parts, key=lambda part: -part.median_ms * part.calls))


def _instruction(instructions: Sequence[Instruction | None], index: int) -> Instruction | None:
    return instructions[index] if 0 <= index < len(instructions) else None


def _ms(profile: Any) -> float:
    return float(profile.end_time - profile.start_time) / _NS_PER_MS


def _program_of(pte: Any) -> Any:
    return getattr(pte, "program", pte)  # ExecuTorch's PTEFile wraps the Program


def _chain(plan: Any) -> list[Instruction | None]:
    if not plan.chains:
        return []
    counts: dict[str, int] = {}
    chain: list[Instruction | None] = []
    for instruction in plan.chains[0].instructions:
        args = instruction.instr_args
        if hasattr(args, "delegate_index"):
            backend_id = plan.delegates[args.delegate_index].id
            backend = backend_by_details_class(backend_id)
            shown = backend.display if backend else backend_id
            counts[shown] = counts.get(shown, 0) + 1
            chain.append(Instruction(f"{shown} #{counts[shown]}", "delegate"))
        elif hasattr(args, "op_index"):
            chain.append(Instruction(op_name(plan.operators[args.op_index].name), "cpu"))
        else:
            chain.append(None)
    return chain


def op_name(operator: str) -> str:
    """ "aten::cumsum" as the report writes ops: "aten.cumsum"."""
    return operator.replace("::", ".")
