"""The readable build report: a block per target, a line per method, then what stayed off."""

from __future__ import annotations

from typing import Any


def format_report(document: dict[str, Any], seconds: float) -> str:
    lines: list[str] = []
    for target in document["targets"]:
        lines.extend(_target_lines(target))
    results = document["targets"]
    failed = sum(1 for t in results if t["status"] != "ok")
    built = len(results) - failed
    summary = f"{built} target{'s' if built != 1 else ''} built"
    if failed:
        summary += f", {failed} failed"
    lines.append(f"{summary} in {seconds:.1f} s")
    return "\n".join(lines) + "\n"


def _target_lines(target: dict[str, Any]) -> list[str]:
    if target["status"] != "ok":
        return [f"{target['name']}: FAILED", *_indent(_error_text(target["error"]), 2), ""]
    lines = [f"{target['name']}: {target['output']}  ({_how_built(target)})"]
    for name, method in target["methods"].items():
        lines.append(f"  {name}: {coverage_text(method)}")
        for op in method["not_delegated"]:
            where = f"{op['file']}:{op['line']}" if op["file"] else "(no user source line)"
            lines.append(f"    not delegated  {op['op']:<28} {where:<28} {op['reason']}")
    lines.append("")
    return lines


def _how_built(target: dict[str, Any]) -> str:
    if target.get("reused") == "up-to-date":
        return "up to date"
    if target.get("reused") == "same-program":
        return f"{target['seconds']:.1f} s, program unchanged: kept the .pte"
    cache = target["cache"]
    rebased = f" ({cache['rebased']} rebased)" if cache.get("rebased") else ""
    how = f"{target['seconds']:.1f} s, cache {cache['hits']} hit{rebased} / {cache['misses']} miss"
    for kind, counts in target.get("memo", {}).items():
        how += f", {kind} {counts['hits']} hit / {counts['misses']} miss"
    return how


def coverage_text(method: dict[str, Any]) -> str:
    """`231 of 271 ops on XNNPACK in 42 partitions (85 %)`, the summary users look for first."""
    ops, delegated = method["ops"], method["ops_delegated"]
    backends = ", ".join(
        f"{counts['ops']} on {name} in {counts['partitions']} "
        f"partition{'s' if counts['partitions'] != 1 else ''}"
        for name, counts in method["backends"].items()
    )
    if not backends:
        return f"0 of {ops} ops delegated"
    return f"{delegated} of {ops} ops delegated ({backends}; {method['coverage']:.0%})"


def _error_text(error: dict[str, Any]) -> str:
    where = f"{error['file']}:{error['line']}" if error.get("line") else error.get("file")
    return f"{where}: {error['message']}" if where else error["message"]


def _indent(text: str, spaces: int) -> list[str]:
    return [" " * spaces + line for line in text.splitlines()]
