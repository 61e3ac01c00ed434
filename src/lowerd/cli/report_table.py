"""The readable build report: a block per target, a line per method, then what stayed off.

What stayed off is shown grouped by cause (lowering/refusals.py), most costly first: the groups
that split partitions under "fix first", then the ones leaving the most work on the CPU, up to a
few lines; `--all` lists every op instead, `--modules` adds the coverage of the module tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lowerd.cli.verify_table import measured_cpu, summary_lines, with_cpu_time
from lowerd.project.report_page import sizes_text

# Groups shown without --all: two lines each, so the refusals of a real model fit a screen.
SHOWN_GROUPS = 6


@dataclass(frozen=True)
class ReportView:
    all_ops: bool = False  # every not-delegated op on a line of its own, not grouped
    modules: bool = False  # the coverage of each module subtree
    verbose: bool = False  # each method's edge generation: by region, or stock's and why


def format_report(document: dict[str, Any], seconds: float, view: ReportView | None = None) -> str:
    lines: list[str] = []
    for target in document["targets"]:
        lines.extend(_target_lines(target, view or ReportView()))
    results = document["targets"]
    failed = sum(1 for t in results if t["status"] != "ok")
    built = len(results) - failed
    summary = f"{built} target{'s' if built != 1 else ''} built"
    if failed:
        summary += f", {failed} failed"
    if unloadable := sum(1 for t in results if (t.get("runtime") or {}).get("problems")):
        summary += (
            f", {unloadable} would not load on {'its' if unloadable == 1 else 'their'} runtime"
        )
    lines.append(f"{summary} in {seconds:.1f} s")
    return "\n".join(lines) + "\n"


def _target_lines(target: dict[str, Any], view: ReportView) -> list[str]:
    if target["status"] != "ok":
        return [f"{target['name']}: FAILED", *_indent(_error_text(target["error"]), 2), ""]
    lines = [f"{target['name']}: {target['output']}  ({_how_built(target)})"]
    if sizes := sizes_text(target):
        lines.append(f"  {sizes}")
    lines.extend(_runtime_lines(target.get("runtime")))
    lines.extend(summary_lines(target.get("verification")))
    for name, method in target["methods"].items():
        lines.append(f"  {name}: {coverage_text(method)}")
        if view.verbose and (generation := method.get("edge_generation")):
            lines.append(f"    edge generation: {generation['words']}")
        if view.modules:
            lines.extend(_module_lines(method.get("modules") or []))
        # A report stored by an older lowerd has no groups: its ops are listed one by one.
        if view.all_ops or not method.get("refusals"):
            lines.extend(_op_line(op) for op in method["not_delegated"])
        else:
            lines.extend(_group_lines(method, measured_cpu(target.get("verification"), name)))
    lines.append("")
    return lines


def _runtime_lines(runtime: dict[str, Any] | None) -> list[str]:
    """The load problems on the target's runtime, each at its line; nothing when it loads."""
    if not runtime or not runtime["problems"]:
        return []
    lines = [f"  does not load on {runtime['runtime']}:"]
    return lines + [f"    error: {_error_text(problem)}" for problem in runtime["problems"]]


def _op_line(op: dict[str, Any]) -> str:
    where = f"{op['file']}:{op['line']}" if op["file"] else "(no user source line)"
    line = f"    not delegated  {op['op']:<28} {where:<28} {op['reason']}"
    parts = [_frame_text(op.get("library"), op.get("module_class")), op.get("module_path")]
    origin = [str(part) for part in parts if part]
    return line + (f"  ({' in '.join(origin)})" if origin else "")


def _group_lines(method: dict[str, Any], measured: dict[str, float] | None = None) -> list[str]:
    """The costliest groups, two lines each: what and why, then where and what it costs; with
    the CPU time verification measured on this host, each group's share, slowest first."""
    groups = with_cpu_time(method["refusals"], measured or {})
    shown = groups[:SHOWN_GROUPS]
    splitting = [g for g in shown if g.get("boundaries")]
    lines = []
    if splitting:
        lines.append(f"    fix first{_fix_first_note(method, len(splitting))}:")
        lines.extend(line for group in splitting for line in _group_pair(group))
    rest = [g for g in shown if not g.get("boundaries")]
    if rest:
        title = "also on the CPU" if splitting else "not delegated"
        lines.append(f"    {title}, most work first:")
        lines.extend(line for group in rest for line in _group_pair(group))
    hidden = groups[len(shown) :]
    if hidden:
        ops = sum(g["count"] for g in hidden)
        more = f"{len(hidden)} more group{'s' if len(hidden) != 1 else ''} ({_ops(ops)})"
        lines.append(f"    … {more}; --all lists every op")
    return lines


def _fix_first_note(method: dict[str, Any], fixes: int) -> str:
    """` (these 3 would leave 9 of 25 partitions)`, from the lowering's cumulative count."""
    after = method.get("partitions_if_fixed") or []
    partitions = sum(b.get("partitions", 0) for b in method.get("backends", {}).values())
    if len(after) < fixes or not partitions:
        return ""
    these = "this one" if fixes == 1 else f"these {fixes}"
    return f" ({these} would leave {after[fixes - 1]} of {partitions} partitions)"


def _group_pair(group: dict[str, Any]) -> list[str]:
    """`9× aten.mean.dim  <reason>  (merges 8 partitions, 576 elements)`, then where: the
    library line, the modules it repeats over and the user's line."""
    cost = []
    if group.get("boundaries"):
        merges = group["boundaries"]
        cost.append(f"merges {merges} partition{'s' if merges != 1 else ''}")
    cost.append(f"{_quantity(group.get('elements') or 0)} elements")
    if "cpu_ms" in group:
        cost.append(f"{group['cpu_ms']:.3g} ms here")
    first = f"      {group['count']}× {group['op']}  {group['reason']}  ({', '.join(cost)})"
    where = []
    library = _frame_text(group.get("library"), group.get("module_class"))
    if library:
        where.append(library)
    if group.get("modules"):
        paths = len(group.get("module_paths") or [])
        # ×n when the ops repeat over fewer modules than there are ops (6 per attention layer)
        repeats = f" (×{paths})" if 1 < paths < group["count"] else ""
        where.append(f"in {group['modules']}{repeats}")
    if group.get("file"):
        where.append(f"from {group['file']}:{group['line']}")
    return [first, "         " + " · ".join(where or ["(no source line)"])]


def _frame_text(frame: dict[str, Any] | None, module_class: str | None) -> str | None:
    """`transformers/models/llama/modeling_llama.py:65 (LlamaRMSNorm.forward)`."""
    if not frame:
        return None
    function = frame.get("function")
    if function == "forward" and module_class:
        function = f"{module_class}.forward"  # the innermost module's forward is running
    text = f"{_library_file(frame['file'])}:{frame['line']}"
    return f"{text} ({function})" if function else text


def _library_file(file: str) -> str:
    """A file of an installed package from its package folder on: the same on every machine."""
    return re.split(r"/(?:site|dist)-packages/", file)[-1]


def _module_lines(modules: list[dict[str, Any]]) -> list[str]:
    """The module tree, a module per line under its parent, repeated layers as one (`*`)."""
    lines = ["    modules (delegated ops of each subtree):"]
    paths = [m["path"] for m in modules]
    for module in modules:
        parent = _parent_path(module["path"], paths)
        depth = _depth(module["path"], paths)
        name = module["path"][len(parent) + 1 :] if parent else module["path"] or "(root)"
        label = f"{'  ' * depth}{name}"
        if module.get("instances", 1) > 1:
            label += f" ×{module['instances']}"
        ops, delegated = module["ops"], module["ops_delegated"]
        # The server's percent (ModuleCoverage.percent); none from an older server.
        percent = f"{module['percent']} %" if module.get("percent") is not None else ""
        cls = module.get("module_class") or ""
        lines.append(f"      {label:<44} {cls:<24} {delegated:>5}/{ops:<5} {percent:>5}")
    return lines


def _parent_path(path: str, paths: list[str]) -> str:
    """The longest other path that is a dotted prefix of this one ("" is the root's)."""
    candidates = [p for p in paths if p != path and (p == "" or path.startswith(p + "."))]
    return max(candidates, key=len, default="") if path else ""


def _depth(path: str, paths: list[str]) -> int:
    depth = 0
    while path:
        path = _parent_path(path, paths)
        depth += 1
    return depth


def _ops(count: int) -> str:
    return f"{count} op{'s' if count != 1 else ''}"


def _quantity(count: int) -> str:
    """1234 -> "1.2k": elements are an estimate, three digits say enough."""
    for size, unit in ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k")):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)


def _how_built(target: dict[str, Any]) -> str:
    if target.get("reused") == "up-to-date":
        return "up to date"
    if target.get("reused") == "same-program":
        return f"{target['seconds']:.1f} s, program unchanged: kept the .pte"
    if target.get("reused") == "same-source":  # lowering/token_keep.py
        return f"{target['seconds']:.1f} s, only comments or layout changed: kept the .pte"
    cache = target["cache"]
    rebased = f" ({cache['rebased']} rebased)" if cache.get("rebased") else ""
    how = f"{target['seconds']:.1f} s, cache {cache['hits']} hit{rebased} / {cache['misses']} miss"
    for kind, counts in target.get("memo", {}).items():
        how += f", {kind} {counts['hits']} hit / {counts['misses']} miss"
    if remote := cache.get("remote_counts"):
        # Of the hits, those the remote tier served; what it was sent; its state when not ok.
        how += f", remote {remote['hits']} hit / {remote['puts']} put"
        if remote.get("rejected"):  # unsigned, mis-signed or over the cap: the warning says
            how += f", {remote['rejected']} rejected"
        if cache["remote"] != "ok":
            how += f" ({cache['remote'].split(':')[0]})"
    return how


def coverage_text(method: dict[str, Any]) -> str:
    """`231 of 271 ops on XNNPACK in 42 partitions (85 %)`, the summary users look for first: the
    report's own (project/report_model.py coverage_of), as the editors show it."""
    return str(method["summary"])


def _error_text(error: dict[str, Any]) -> str:
    where = f"{error['file']}:{error['line']}" if error.get("line") else error.get("file")
    return f"{where}: {error['message']}" if where else error["message"]


def _indent(text: str, spaces: int) -> list[str]:
    return [" " * spaces + line for line in text.splitlines()]
