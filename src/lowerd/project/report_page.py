"""The last build's report as one standalone HTML page (`lowerd report --html FILE`).

Everything is inline (CSS, a small script, the graphs' SVG) and the page's Content-Security-
Policy allows no fetch at all, so it opens anywhere: a CI artifact, a mail, a VS Code webview.
Per target: its sizes; per method: the coverage bar, the partitions (backend, ops, blob and
weight bytes, cache outcome, colour), the ops left on the CPU and why, and the op graph with each
node coloured by its partition and the CPU ops marked.

Source lines are shown as the report has them (relative to the project root: readable anywhere)
and link to `vscode://file/<absolute path>:<line>`, which opens the line in VS Code where it is
installed; in VS Code's webview the script posts {type: "open", file, line} instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from lowerd.cache.location import format_size
from lowerd.project.graph_svg import CPU_FILL, CPU_STROKE, draw, fragment, partition_colour
from lowerd.project.method_graph import MAX_NODES, MethodGraph
from lowerd.project.report_model import MethodReport, NotDelegatedOp
from lowerd.project.result import TargetResult
from lowerd.project.wire import encode

# No fetch of any kind: the page is whole as written.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
CACHE_WORDS = {
    "hit": "hit",
    "rebased": "hit (rebased)",
    "miss": "miss",
    "uncached": "not cached",
    None: "—",
}


@dataclass(frozen=True)
class TargetPage:
    """A target's part of the page: its recorded result, or None when it has no build record;
    `stale`: why the record no longer matches the sources (None: it does); `recorded`: when;
    `refused`: the line saying why a record there was not taken."""

    name: str
    result: TargetResult | None
    stale: str | None = None
    recorded: str | None = None
    refused: str | None = None


def render_page(
    project: str, root: Path, targets: Sequence[TargetPage], use_dot: bool = True
) -> str:
    sections = "".join(_target(page, root, use_dot) for page in targets)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lowerd report: {escape(project)}</title><style>{STYLE}</style></head>
<body><h1>lowerd delegation report</h1><p class="muted">{escape(project)} · {escape(str(root))}</p>
{sections}<script>{SCRIPT}</script></body></html>
"""


def _target(page: TargetPage, root: Path, use_dot: bool) -> str:
    anchor = "t-" + fragment(page.name)
    result = page.result
    if result is None:
        return (
            f'<section class="target" id="{anchor}"><h2>{escape(page.name)} '
            '<span class="badge pending">not built</span></h2>'
            f'<p class="muted">{escape(page.refused or "No build record")}: run '
            "<code>lowerd build</code>.</p></section>"
        )
    badge = (
        f'<span class="badge stale" title="{escape(page.stale)}">out of date</span>'
        if page.stale
        else '<span class="badge ok">ok</span>'
    )
    facts = [f"<code>{escape(_relative(result.output or '', root))}</code>"]
    if result.sha256:
        sha256 = escape(result.sha256)
        facts.append(f'sha256 <code title="{sha256}">{escape(result.sha256[:12])}</code>')
    if page.recorded:
        facts.append(f"built {escape(page.recorded)}")
    stale = f'<p class="stale">Out of date: {escape(page.stale)}.</p>' if page.stale else ""
    document = encode(result)
    sizes = sizes_text(document)
    sizes_line = f'<p class="sizes">{escape(sizes)}</p>' if sizes else ""
    methods = "".join(
        _method(f"{anchor}-{fragment(name)}-", name, report, root, use_dot)
        for name, report in result.methods.items()
    )
    return (
        f'<section class="target" id="{anchor}"><h2>{escape(page.name)} {badge}</h2>'
        f'<p class="muted">{" · ".join(facts)}</p>{stale}{sizes_line}{methods}</section>'
    )


def _method(prefix: str, name: str, report: MethodReport, root: Path, use_dot: bool) -> str:
    memory = []
    if report.planned_memory_bytes is not None:
        memory.append(f"planned memory {format_size(report.planned_memory_bytes)}")
    if report.constant_bytes is not None:
        memory.append(f"constants {format_size(report.constant_bytes)}")
    hint = f'<p class="hint">{escape(report.fixes_hint)}</p>' if report.fixes_hint else ""
    return (
        f'<section class="method" id="{prefix[:-1]}"><h3>{escape(name)}: '
        f"{escape(report.summary)}</h3>{_coverage_bar(report)}{hint}"
        + (f'<p class="muted">{" · ".join(memory)}</p>' if memory else "")
        + _partitions(report)
        + _not_delegated(prefix, report.not_delegated, root)
        + _graph(prefix, report, root, use_dot)
        + "</section>"
    )


def _coverage_bar(report: MethodReport) -> str:
    """A segment per partition (its colour, its share of the ops), then the CPU's."""
    if report.ops <= 0:
        return ""
    segments = [
        f'<span class="segment" style="width:{100 * p.ops / report.ops:.3f}%;'
        f'background:{partition_colour(i)}" title="{escape(p.backend)} partition {i}: '
        f'{p.ops} ops"></span>'
        for i, p in enumerate(report.partitions)
    ]
    cpu = report.ops - report.ops_delegated
    if cpu > 0:
        segments.append(
            f'<span class="segment cpu" style="width:{100 * cpu / report.ops:.3f}%" '
            f'title="portable CPU: {cpu} ops"></span>'
        )
    return (
        f'<div class="bar" role="img" aria-label="{report.coverage_percent} % delegated">'
        f"{''.join(segments)}</div>"
    )


def _partitions(report: MethodReport) -> str:
    if not report.partitions:
        return '<p class="muted">No partition: every op runs on the portable CPU.</p>'
    rows = "".join(
        f'<tr class="partition" data-partition="{i}"><td class="num">{i}</td>'
        f'<td><span class="swatch" style="background:{partition_colour(i)}"></span>'
        f'{escape(p.backend)}</td><td class="num">{p.ops}</td>'
        f'<td class="num">{_size(p.blob_bytes)}</td><td class="num">{_size(p.data_bytes)}</td>'
        f"<td>{escape(CACHE_WORDS.get(p.cache, p.cache or '—'))}</td></tr>"
        for i, p in enumerate(report.partitions)
    )
    return (
        '<table class="partitions"><thead><tr><th class="num">#</th><th>backend</th>'
        '<th class="num">ops</th><th class="num">blob</th><th class="num">weights</th>'
        f"<th>cache</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _size(count: int | None) -> str:
    return format_size(count) if count is not None else "—"


def _not_delegated(prefix: str, ops: list[NotDelegatedOp], root: Path) -> str:
    if not ops:
        return '<p class="all">Every op is delegated.</p>'
    rows = "".join(
        f'<tr class="cpu-op" id="{prefix}op-{fragment(op.node)}"><td><code>{escape(op.op)}</code>'
        f"</td><td>{_source_link(op.file, op.line, root)}</td><td>{escape(op.reason)}</td>"
        f"<td>{escape(op.module_path or '')}</td></tr>"
        for op in ops
    )
    return (
        '<table class="not-delegated"><thead><tr><th>not delegated</th><th>at</th><th>why</th>'
        f"<th>module</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _source_link(file: str | None, line: int | None, root: Path) -> str:
    if not file:
        return '<span class="muted">(no source line)</span>'
    path = Path(file) if Path(file).is_absolute() else root / file
    label = f"{file}:{line}" if line else file
    number = escape(str(line or 1))
    return (
        f'<a class="source" href="vscode://file/{escape(str(path))}:{number}" '
        f'data-file="{escape(file)}" data-line="{number}">{escape(label)}</a>'
    )


def _graph(prefix: str, report: MethodReport, root: Path, use_dot: bool) -> str:
    graph = report.graph
    if graph is None:
        return '<p class="muted">No graph in this build record (built by an older lowerd).</p>'
    if not graph.nodes:
        return ""
    by_node = {op.node: op for op in report.not_delegated}
    tooltips = [_tooltip(graph, index, report, by_node) for index in range(len(graph.nodes))]
    drawing = draw(graph, tooltips, prefix, use_dot)
    engine = "Graphviz dot" if drawing.engine == "dot" else "a plain layered layout"
    notes = [f"{len(graph.nodes)} nodes, drawn by {engine}"]
    if graph.collapsed:
        notes.append(
            f"the method has {graph.total_nodes} ops, more than {MAX_NODES}: each partition "
            "is drawn as one node"
        )
    if graph.omitted:
        notes.append(f"{graph.omitted} ops past the first {MAX_NODES} nodes are not drawn")
    legend = (
        f'<span class="swatch" style="background:{CPU_FILL};border:1px dashed {CPU_STROKE}">'
        "</span>portable CPU (click for why)"
    )
    return (
        f'<details class="graph" open><summary>Graph ({"; ".join(notes)})</summary>'
        f'<p class="legend">{legend}</p><div class="svg">{drawing.svg}</div></details>'
    )


def _tooltip(
    graph: MethodGraph, index: int, report: MethodReport, by_node: dict[str, NotDelegatedOp]
) -> str:
    node = graph.nodes[index]
    if not node.on_cpu:
        backend = (
            report.partitions[node.partition].backend
            if node.partition < len(report.partitions)
            else "?"
        )
        return f"{node.op} — {backend} partition {node.partition}"
    op = by_node.get(node.name or "")
    where = f" at {op.file}:{op.line}" if op is not None and op.file else ""
    why = f": {op.reason}" if op is not None else ""
    return f"{node.op} — portable CPU{where}{why}"


def _relative(path: str, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return path


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px;
  color: #1f2328; background: #fff; margin: 0 24px 24px; }
h1 { font-size: 1.4em; margin: 18px 0 2px; }
h2 { font-size: 1.2em; margin: 0 0 4px; }
h3 { font-size: 1em; margin: 14px 0 6px; }
.muted { color: #656d76; }
.target { border: 1px solid #d0d7de; border-radius: 6px; padding: 12px 16px; margin: 16px 0; }
.method { border-top: 1px solid #eaeef2; margin-top: 10px; }
.sizes { font-family: ui-monospace, monospace; }
.badge { font-size: 0.75em; font-weight: 600; padding: 1px 7px; border-radius: 10px; }
.badge.ok { background: #1a7f37; color: #fff; }
.badge.stale { background: #9a6700; color: #fff; }
.badge.pending { background: #6e7781; color: #fff; }
.stale { color: #9a6700; }
.hint { color: #0969da; }
.all { color: #1a7f37; }
.bar { display: flex; height: 12px; width: 100%; max-width: 640px; background: #eaeef2;
  border-radius: 4px; overflow: hidden; margin: 4px 0 8px; }
.segment { display: block; height: 100%; border-right: 1px solid #fff; }
.segment.cpu { background: #d1242f; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { text-align: left; padding: 3px 14px 3px 0; border-bottom: 1px solid #d8dee4;
  vertical-align: top; }
td.num, th.num { text-align: right; }
tr.partition:hover, tr.cpu-op:target { background: #fff8c5; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 3px;
  margin-right: 6px; vertical-align: -1px; }
a.source { color: #0969da; text-decoration: none; }
a.source:hover { text-decoration: underline; }
code { font-family: ui-monospace, SFMono-Regular, monospace; }
details.graph summary { cursor: pointer; font-weight: 600; }
.svg { overflow: auto; max-height: 80vh; border: 1px solid #eaeef2; border-radius: 4px; }
.svg svg .node.hl rect, .svg svg .node.hl path, .svg svg .node.hl polygon { stroke: #0969da;
  stroke-width: 3; }
"""

# Hovering a partition's row outlines its nodes in the graph; in a VS Code webview a source link
# opens the line in the editor. The last line marks the page ready (its tests read it).
SCRIPT = """
const vscode = typeof acquireVsCodeApi === "function" ? acquireVsCodeApi() : undefined;
for (const row of document.querySelectorAll("tr.partition")) {
  const method = row.closest("section.method");
  const nodes = () => method.querySelectorAll(".node.p" + row.dataset.partition);
  row.addEventListener("mouseenter", () => nodes().forEach((node) => node.classList.add("hl")));
  row.addEventListener("mouseleave", () => nodes().forEach((node) => node.classList.remove("hl")));
}
document.addEventListener("click", (event) => {
  const link = event.target instanceof Element ? event.target.closest("a.source") : null;
  if (!link || !vscode) return;
  event.preventDefault();
  vscode.postMessage({ type: "open", file: link.dataset.file, line: Number(link.dataset.line) });
});
document.body.dataset.ready = "1";
"""


def sizes_text(target: dict[str, Any]) -> str | None:
    """`.pte 4.2 KiB (constants 0 B, delegate blobs 1.4 KiB, delegate weights 576 B); forward:
    planned memory 192 B`: what the program costs a device. None in a record of an older lowerd."""
    sizes = target.get("sizes")
    if not sizes:
        return None
    parts = [f"constants {format_size(sizes['constant_bytes'])}"]
    if sizes.get("delegate_blob_bytes"):
        parts.append(f"delegate blobs {format_size(sizes['delegate_blob_bytes'])}")
    if sizes.get("delegate_data_bytes"):
        parts.append(f"delegate weights {format_size(sizes['delegate_data_bytes'])}")
    text = f".pte {format_size(sizes['pte_bytes'])} ({', '.join(parts)})"
    planned = [
        f"{name}: planned memory {format_size(method['planned_memory_bytes'])}"
        for name, method in target["methods"].items()
        if method.get("planned_memory_bytes") is not None
    ]
    return "; ".join([text, ", ".join(planned)]) if planned else text
