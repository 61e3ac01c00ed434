"""What `lowerd verify` prints: per target its verdict, per method and input the error against
eager, and the host latency split by delegate partition and CPU op."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lowerd.project.result import TargetResult
from lowerd.project.verification import MethodVerification, Verification
from lowerd.project.wire import decode


def format_verification(document: dict[str, Any]) -> str:
    lines: list[str] = []
    for raw in document.get("targets", []):
        result = decode(TargetResult, raw)
        lines.extend(target_lines(result))
        lines.append("")
    return "\n".join(lines)


def target_lines(result: TargetResult) -> list[str]:
    if not result.ok:
        error = result.error
        where = f" ({error.file}:{error.line})" if error and error.file else ""
        return [f"{result.name}: build failed: {error.message if error else '?'}{where}"]
    verification = result.verification
    if verification is None:
        return [f"{result.name}: not verified"]
    return [_heading(result.name, verification), *_rows(verification)]


def summary_lines(raw: dict[str, Any] | None) -> list[str]:
    """What `lowerd build`'s report says of a target's verification: its verdict, each method's
    largest error, first diverging op and host latency in one line each."""
    if raw is None:
        return []
    verification = decode(Verification, raw)
    reused = ", as verified before" if verification.reused else ""
    lines = [
        f"  verified: {verification.verdict.upper()} against {verification.reference} on "
        f"{verification.runtime}{reused}"
    ]
    if verification.error:
        lines.append(f"    {verification.error.splitlines()[0]}")
    for name, method in verification.methods.items():
        line = f"    {name}: max abs error {method.max_abs:.3g} ({method.verdict})"
        if method.divergence is not None:
            divergence = method.divergence
            where = f" at {divergence.file}:{divergence.line}" if divergence.file else ""
            line += f"; {divergence.message()}{where}"
        lines.append(line)
        if method.latency is not None:
            lines.append(f"    {method.latency.summary(name)}")
    return lines


def measured_cpu(raw: dict[str, Any] | None, method: str) -> dict[str, float]:
    """The method's CPU ops as verification timed them on this host: "aten.cumsum" -> ms per
    run (all its calls); empty when not measured."""
    if raw is None:
        return {}
    verified = decode(Verification, raw).methods.get(method)
    if verified is None or verified.latency is None:
        return {}
    parts = verified.latency.parts
    return {part.name: part.median_ms * part.calls for part in parts if part.kind == "cpu"}


def with_cpu_time(groups: list[dict[str, Any]], measured: dict[str, float]) -> list[dict[str, Any]]:
    """Refusal groups with their measured CPU time ("cpu_ms": their op's time, shared among the
    groups of that op by their counts), slowest first; as they were when nothing was measured."""
    if not measured:
        return groups
    counts: dict[str, int] = {}
    for group in groups:
        counts[_base_op(group["op"])] = counts.get(_base_op(group["op"]), 0) + group["count"]
    timed = []
    for group in groups:
        op = _base_op(group["op"])
        if op in measured:
            group = {**group, "cpu_ms": measured[op] * group["count"] / counts[op]}
        timed.append(group)
    return sorted(timed, key=lambda group: -group.get("cpu_ms", -1.0))


def _base_op(op: str) -> str:
    """ "aten.cumsum.default" as the runtime's kernel names it: "aten.cumsum"."""
    return op.rsplit(".", 1)[0] if op.count(".") >= 2 else op


def _heading(name: str, verification: Verification) -> str:
    reused = ", same program as verified before" if verification.reused else ""
    heading = f"{name}: {verification.verdict.upper()}  ({verification.runtime}, "
    heading += f"against {verification.reference}{reused})"
    if verification.error:
        heading += "".join(f"\n  {line}" for line in verification.error.splitlines())
    return heading


def _rows(verification: Verification) -> list[str]:
    table: list[tuple[str, ...]] = [
        ("method", "input", "verdict", "max abs", "max rel", "tolerance (atol/rtol)")
    ]
    for name, method in verification.methods.items():
        table.extend(_method_rows(name, method))
    lines = _aligned(table) if len(table) > 1 else []
    for name, method in verification.methods.items():
        if method.divergence is not None:
            divergence = method.divergence
            where = f" at {divergence.file}:{divergence.line}" if divergence.file else ""
            lines.append(f"  {name}: {divergence.message()}{where}")
        if method.latency is not None:
            latency = method.latency
            lines.append(
                f"  {name}: {latency.median_ms:.3g} ms median, {latency.p90_ms:.3g} ms p90 of "
                f"{latency.runs} runs on {latency.host}"
            )
            lines.extend(f"    {line}" for line in _parts(method))
    return lines


def _method_rows(name: str, method: MethodVerification) -> list[tuple[str, ...]]:
    tolerance = method.tolerance
    shown = f"{tolerance.atol:g}/{tolerance.rtol:g} {tolerance.why}"
    rows: list[tuple[str, ...]] = []
    for check in method.inputs:
        if check.error:
            rows.append((name, check.label, "ERROR", "", "", check.error.splitlines()[0]))
            continue
        most = max(check.outputs, key=lambda output: output.max_abs, default=None)
        verdict = "pass" if check.passed else "FAIL"
        errors = (f"{most.max_abs:.3g}", f"{most.max_rel:.3g}") if most else ("", "")
        rows.append((name, check.label, verdict, *errors, shown))
    if method.error:
        rows.append((name, "", "ERROR", "", "", method.error))
    return rows


def _parts(method: MethodVerification) -> Iterable[str]:
    latency = method.latency
    if latency is None:
        return []
    return [
        f"{part.name:<16} {part.kind:<8} {part.median_ms:.3g} ms"
        + (f" ({part.calls} calls)" if part.calls > 1 else "")
        for part in latency.parts
    ]


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]  # fmt: skip
