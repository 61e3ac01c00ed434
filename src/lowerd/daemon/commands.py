"""The language server's own commands and notifications: each one's arguments and answer as a
class, read and written by project/wire.py like every other wire shape (the JSON Schema,
docs/schema/lowerd.schema.json, has them all). An argument of the wrong type is answered with the
converter's error naming it, in the command's own answer.

    lowerd.build, lowerd.buildAll  [NAME, ...]        -> BuildAnswer (a ReportAnswer while no
                                                         project is loaded)
    lowerd.report                  [NAME, ...]        -> ReportAnswer
    lowerd.stockScript             [NAME]             -> ScriptAnswer
    lowerd.reportPage              [NAME, ...]        -> PageAnswer
    lowerd.explain                 [NAME, ...]        -> project/explain.py ExplainAnswer
    lowerd.compare                 [TARGET, BACKENDS?] -> project/compare_result.py CompareResult,
                                                         or CompareRefusal
    lowerd/buildStarted, lowerd/buildFinished (notifications): BuildStarted, BuildFinished

[NAME, ...] may also be one list of names; none means every target. BACKENDS is a list of names
or "xnnpack,vulkan".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lowerd.project.compare_result import BackendComparison
from lowerd.project.result import ErrorInfo, Status, TargetResult
from lowerd.project.wire import read_positional, wire_field, wire_shape

_ONLY_GIVEN = wire_field(omit_none=True)


# Arguments --------------------------------------------------------------------------------------


@wire_shape(positional=True)
@dataclass(frozen=True)
class TargetNames:
    """Target names (none: every target); one list of them is taken for the names too."""

    targets: tuple[str, ...] = field(default=(), metadata=wire_field(rest=True))


@wire_shape(positional=True)
@dataclass(frozen=True)
class CompareArguments:
    """The target, and the backends to lower it with (a list of names or "xnnpack,vulkan";
    none: every known backend)."""

    target: str
    backends: tuple[str, ...] = ()


def target_names(arguments: Sequence[Any] | None) -> tuple[str, ...]:
    """[NAME, ...] or [[NAME, ...]] as the names; WireError naming a wrong one."""
    names: list[Any] = []
    for argument in arguments or []:
        names.extend(argument if isinstance(argument, list) else [argument])
    return read_positional(TargetNames, names).targets


def compare_arguments(arguments: Sequence[Any] | None) -> CompareArguments:
    """[TARGET, BACKENDS?]; WireError naming a wrong or missing one."""
    arguments = list(arguments or [])
    if len(arguments) > 1 and isinstance(arguments[1], str):
        arguments[1] = arguments[1].split(",") if arguments[1] else []
    return read_positional(CompareArguments, arguments)


# Answers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildAnswer:
    """The targets' results as `lowerd build --json` has them (null for one the build left
    without a result); `error` alone for unknown targets."""

    config: str | None = field(default=None, metadata=_ONLY_GIVEN)
    error: str | None = field(default=None, metadata=_ONLY_GIVEN)
    targets: tuple[TargetResult | None, ...] = ()


@dataclass(frozen=True)
class UnbuiltTarget:
    """A target without a result yet."""

    name: str


@dataclass(frozen=True)
class ReportAnswer:
    """The last result of each target, and which are being rebuilt; while no config is loaded,
    its error (null before the first load) and no targets."""

    config: str | None
    error: ErrorInfo | None
    targets: tuple[TargetResult | UnbuiltTarget, ...] = ()
    building: tuple[str, ...] | None = field(default=None, metadata=_ONLY_GIVEN)


@dataclass(frozen=True)
class ScriptAnswer:
    """A stock ExecuTorch script that reproduces the target (project/reproducer.py)."""

    target: str | None = field(default=None, metadata=_ONLY_GIVEN)
    script: str | None = field(default=None, metadata=_ONLY_GIVEN)
    error: str | None = field(default=None, metadata=_ONLY_GIVEN)


@dataclass(frozen=True)
class PageAnswer:
    """`lowerd report --html`'s page of the last builds, op graphs drawn."""

    html: str | None = field(default=None, metadata=_ONLY_GIVEN)
    error: str | None = field(default=None, metadata=_ONLY_GIVEN)


@wire_shape(order=("target", "backends", "warnings", "config", "error"))
@dataclass(frozen=True)
class CompareRefusal:
    """lowerd.compare's answer when there is nothing to compare: no project, no target, a
    target or backend it does not know."""

    target: str
    error: str
    backends: tuple[BackendComparison, ...] = ()
    warnings: tuple[str, ...] = ()
    config: str | None = field(default=None, metadata=_ONLY_GIVEN)


# Notifications ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildStarted:
    target: str
    build_id: int = field(metadata=wire_field(key="buildId"))


@dataclass(frozen=True)
class BuildWritten:
    """A verifying target's build wrote its .pte (sha256) and its diagnostics are published;
    its program runs on the host runtime now, and lowerd/buildFinished follows with the
    verification's diagnostics, lens and hover."""

    target: str
    build_id: int = field(metadata=wire_field(key="buildId"))
    sha256: str | None


@dataclass(frozen=True)
class BuildFinished:
    target: str
    build_id: int | None = field(metadata=wire_field(key="buildId"))
    status: Status
    error_kind: str | None = field(metadata=wire_field(key="errorKind"))
    reused: str | None
    current: bool

    @classmethod
    def of(
        cls, target: str, build_id: int | None, result: TargetResult, current: bool
    ) -> BuildFinished:
        error_kind = result.error.kind if result.error is not None else None
        return cls(target, build_id, result.status, error_kind, result.reused, current)
