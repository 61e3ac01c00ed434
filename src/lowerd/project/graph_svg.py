"""A method's op graph as inline SVG: each op a box coloured by its partition, the ops left on
the portable CPU marked (red, dashed), data flow as arrows.

Drawn by Graphviz's `dot` when it is installed (it routes edges around nodes), else by the plain
layered layout of graph_layout.py. Both give every node a `<g id="PREFIXnode-N" class="node ...">`
(`cpu` for a CPU op, `partition` otherwise), so the page's script and its tests treat them
alike; a CPU op links to `#PREFIXop-<fx node name>`, its row in the page's table.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from html import escape
from typing import Literal

from lowerd.project.graph_layout import NODE_HEIGHT, layered_layout
from lowerd.project.method_graph import MethodGraph

# Light fills that keep black text readable, none of them red (the CPU's colour).
PALETTE = (
    "#a5c8ed",
    "#b5e0a8",
    "#f6e39a",
    "#d8bfe0",
    "#a9dcd8",
    "#ffd1a6",
    "#d9c4b1",
    "#c9d1f3",
)
CPU_FILL = "#fde2e1"
CPU_STROKE = "#d1242f"
# dot lays out a few thousand nodes in seconds; past this it is given up for the plain layout.
DOT_TIMEOUT = 60.0

Engine = Literal["dot", "plain"]


@dataclass(frozen=True)
class Drawing:
    svg: str
    engine: Engine  # what laid it out


def fragment(name: str) -> str:
    """An id fragment of a name (letters, digits, - and _ kept): the page's ids and the links
    to them, safe in any attribute."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def partition_colour(partition: int) -> str:
    return PALETTE[partition % len(PALETTE)]


def short_op(op: str) -> str:
    """`aten.linear.default` -> `linear`; `aten.pow.Tensor_Scalar` -> `pow.Tensor_Scalar`."""
    name = op.removeprefix("aten.").removesuffix(".default")
    return name


def draw(graph: MethodGraph, tooltips: list[str], anchor: str, use_dot: bool = True) -> Drawing:
    """The graph's SVG; `tooltips` has one line per node (what it is, where it comes from),
    `anchor` prefixes the fragment a CPU op links to."""
    dot = shutil.which("dot") if use_dot else None
    if dot is not None:
        svg = _dot_svg(dot, graph, tooltips, anchor)
        if svg is not None:
            return Drawing(svg, "dot")
    return Drawing(_plain_svg(graph, tooltips, anchor), "plain")


def _label(graph: MethodGraph, index: int) -> str:
    return short_op(graph.nodes[index].op)


def _classes(graph: MethodGraph, index: int) -> str:
    """`cpu`, or `partition pN`: what the page highlights when its partition's row is hovered."""
    node = graph.nodes[index]
    return "cpu" if node.on_cpu else f"partition p{node.partition}"


def _dot_svg(dot: str, graph: MethodGraph, tooltips: list[str], anchor: str) -> str | None:
    lines = [
        "digraph method {",
        '  graph [rankdir=TB, nodesep=0.2, ranksep=0.3, bgcolor="transparent"];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, '
        'height=0.3, margin="0.08,0.03"];',
        '  edge [color="#6e7781", arrowsize=0.6];',
    ]
    for index, node in enumerate(graph.nodes):
        attributes = {
            "id": f"{anchor}node-{index}",
            "class": _classes(graph, index),
            "label": _label(graph, index),
            "tooltip": tooltips[index],
            "fillcolor": CPU_FILL if node.on_cpu else partition_colour(node.partition),
            "color": CPU_STROKE if node.on_cpu else "#57606a",
        }
        if node.on_cpu:
            attributes["style"] = "rounded,filled,dashed"
            attributes["penwidth"] = "1.6"
            if node.name:
                attributes["href"] = f"#{anchor}op-{fragment(node.name)}"
        listed = ", ".join(f"{key}={_dot_string(value)}" for key, value in attributes.items())
        lines.append(f"  n{index} [{listed}];")
    lines.extend(f"  n{a} -> n{b};" for a, b in graph.edges)
    lines.append("}")
    try:
        done = subprocess.run(
            [dot, "-Tsvg"],
            input="\n".join(lines),
            capture_output=True,
            text=True,
            timeout=DOT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    start = done.stdout.find("<svg")
    if done.returncode != 0 or start < 0:
        return None
    return done.stdout[start:]  # without the XML prolog and doctype: inline in HTML


def _dot_string(value: str) -> str:
    """A DOT string of a value HTML-escaped first: dot writes some attributes into the SVG as
    they are (href, URL), and leaves an entity it is given as it is."""
    text = escape(value.replace("\r", " ").replace("\n", " "))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _plain_svg(graph: MethodGraph, tooltips: list[str], anchor: str) -> str:
    labels = [_label(graph, index) for index in range(len(graph.nodes))]
    layout = layered_layout(labels, graph.edges)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{layout.width:.0f}" '
        f'height="{layout.height:.0f}" viewBox="0 0 {layout.width:.0f} {layout.height:.0f}">',
        f'<defs><marker id="{escape(anchor)}arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" '
        'fill="#6e7781"/></marker></defs>',
        '<g class="edges" fill="none" stroke="#6e7781" stroke-width="1">',
    ]
    for a, b in graph.edges:
        if max(a, b) >= len(layout.boxes):
            continue
        start, end = layout.boxes[a], layout.boxes[b]
        x1, y1 = start.center_x, start.y + start.height
        x2, y2 = end.center_x, end.y
        bend = (y2 - y1) / 2
        parts.append(
            f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} '
            f'{x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}" '
            f'marker-end="url(#{escape(anchor)}arrow)"/>'
        )
    parts.append("</g>")
    for index, (node, box) in enumerate(zip(graph.nodes, layout.boxes, strict=True)):
        fill = CPU_FILL if node.on_cpu else partition_colour(node.partition)
        stroke = CPU_STROKE if node.on_cpu else "#57606a"
        dash = ' stroke-dasharray="4 2" stroke-width="1.6"' if node.on_cpu else ""
        link = f'<a href="#{escape(anchor)}op-{fragment(node.name)}">' if node.name else ""
        parts.append(
            f'<g id="{escape(anchor)}node-{index}" class="node {_classes(graph, index)}">{link}'
            f"<title>{escape(tooltips[index])}</title>"
            f'<rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.width:.1f}" '
            f'height="{box.height:.1f}" rx="5" fill="{fill}" stroke="{stroke}"{dash}/>'
            f'<text x="{box.center_x:.1f}" y="{box.y + NODE_HEIGHT / 2 + 4:.1f}" '
            f'text-anchor="middle" font-family="Helvetica, Arial, sans-serif" font-size="11">'
            f"{escape(labels[index])}</text>{'</a>' if link else ''}</g>"
        )
    parts.append("</svg>")
    return "".join(parts)
