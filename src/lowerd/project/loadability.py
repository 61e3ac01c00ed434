"""Will the .pte load? What a program needs of a runtime, and what a runtime lacks of it, at the
user's lines. No torch here: the result carries it, the CLI and the editor show it.

A program needs a kernel for each operator its execution plans call (`aten::cumsum.out`: the
delegated ops are the backends' business) and a registered backend for each delegate
(`XnnpackBackend`). ExecuTorch's runtime fails to load a method whose kernel is missing
(OperatorMissing) or whose backend is not registered; lowerd says so at build time, at the line
the op comes from: the line the delegation report gives the op (its refusal), or the first line
of the delegate's partition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from lowerd.project.backends import backend_by_details_class
from lowerd.project.report_model import MethodReport

ProblemKind = Literal["missing-kernel", "unregistered-backend"]
Site = tuple[str | None, int | None]  # a file named like the report's, and its line


@dataclass(frozen=True)
class ProgramNeeds:
    """What the emitted program needs of a runtime, read from its execution plans."""

    # Each operator (`aten::cumsum.out`), sorted, with the kernel keys gen_oplist writes for it
    # (`v1/6;0,1|6;0,1`: dtype and dim order of each tensor argument).
    kernels: dict[str, list[str]] = field(default_factory=dict)
    # Each delegate's backend id, sorted, once.
    backends: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LoadProblem:
    """Why the runtime would refuse the program, at the user's line when one is known."""

    kind: ProblemKind
    name: str  # the operator or the backend id
    message: str
    file: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class RuntimeCheck:
    """The program's needs checked against a runtime (`runtime`, in words)."""

    runtime: str
    needs: ProgramNeeds
    problems: list[LoadProblem] = field(default_factory=list)

    @property
    def loads(self) -> bool:
        return not self.problems


def find_problems(
    needs: ProgramNeeds,
    has_kernel: Callable[[str], bool],
    backends: frozenset[str],
    sources: tuple[str, str],
    methods: Mapping[str, MethodReport],
    entry: Site,
) -> list[LoadProblem]:
    """Every kernel the runtime lacks, then every backend it does not register, each at the
    line the report gives its op (else `entry`, the entry function's). `sources`: where the
    runtime's kernels and its backends are listed, in words."""
    kernels_from, backends_from = sources
    problems = []
    for kernel in needs.kernels:
        if not has_kernel(kernel):
            file, line = _op_site(kernel, methods) or entry
            message = f"{kernel} is not in {kernels_from}: the method cannot load (OperatorMissing)"
            problems.append(LoadProblem("missing-kernel", kernel, message, file, line))
    for backend in needs.backends:
        if backend not in backends:
            file, line = _partition_site(backend, methods) or entry
            message = f"{backend} is not in {backends_from}: its delegates cannot load"
            problems.append(LoadProblem("unregistered-backend", backend, message, file, line))
    return problems


def _op_site(kernel: str, methods: Mapping[str, MethodReport]) -> Site | None:
    """The line of the first op left on the CPU that the kernel runs: `aten::cumsum.out` runs
    what the report names `aten.cumsum.default` (the out variant of the same operator)."""
    operator = kernel.partition(".")[0].replace("::", ".")
    for report in methods.values():
        for op in report.not_delegated:
            if op.op.rpartition(".")[0] == operator and op.file and op.line:
                return op.file, op.line
    return None


def _partition_site(backend_id: str, methods: Mapping[str, MethodReport]) -> Site | None:
    """The first line of the first partition the backend took, as the report names it."""
    known = backend_by_details_class(backend_id)
    shown = known.display if known else backend_id
    for report in methods.values():
        for partition in report.partitions:
            if partition.backend == shown and partition.sources:
                file, line = partition.sources[0][0], partition.sources[0][1]
                return str(file), int(line)
    return None
