"""What a lowered program costs on a device, read off the program ExecuTorch emitted.

The numbers an on-device engineer budgets: the .pte's bytes; the constant tensors the program
keeps itself (ops left on the CPU own theirs; a delegate's weights are in its blob or its named
data); the delegates' blobs and named data; and per method the memory-planned arena
(ExecutionPlan.non_const_buffer_sizes: buffer 0 is reserved and always 0, the others are the
arenas a runtime allocates for activations) and the constants its plan refers to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lowerd.project.result import ProgramSizes


@dataclass(frozen=True)
class MethodSizes:
    planned_memory_bytes: int
    constant_bytes: int


def program_sizes(manager: Any, pte_bytes: int) -> tuple[ProgramSizes, dict[str, MethodSizes]]:
    """The target's sizes and each method's, from an ExecutorchProgramManager after
    to_executorch (its `executorch_program`, before serialization moves data to segments)."""
    program = manager.executorch_program
    # Buffer 0 of constant_buffer is the empty placeholder non-constant tensors point at.
    constants = [len(buffer.storage) for buffer in program.constant_buffer]
    blobs = sum(len(delegate.data) for delegate in program.backend_delegate_data)
    named = getattr(manager, "_named_data", None)  # NamedDataStoreOutput: deduplicated by key
    named_bytes = sum(len(buffer) for buffer in getattr(named, "buffers", None) or [])
    methods = {
        plan.name: MethodSizes(
            planned_memory_bytes=sum(plan.non_const_buffer_sizes),
            constant_bytes=sum(constants[index] for index in _constant_indexes(plan, constants)),
        )
        for plan in program.execution_plan
    }
    return ProgramSizes(pte_bytes, sum(constants), blobs, named_bytes), methods


def _constant_indexes(plan: Any, constants: list[int]) -> set[int]:
    """The constant_buffer entries the plan's tensors hold (data_buffer_idx > 0, not planned)."""
    indexes = set()
    for value in plan.values:
        tensor = value.val
        index = getattr(tensor, "data_buffer_idx", 0)
        if index and getattr(tensor, "allocation_info", None) is None and index < len(constants):
            indexes.add(index)
    return indexes
