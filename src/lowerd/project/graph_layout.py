"""A plain layered layout of a method's op graph, for when Graphviz is not installed.

The nodes come in graph order, which is a topological order (an op comes after what feeds it),
so each node's layer is one below the deepest of its inputs (longest-path layering), and the
nodes of a layer are ordered by where their inputs sit (one barycenter pass, top down). Good
enough to see where the CPU splits a chain of partitions; `dot` draws crossings better.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CHAR_WIDTH = 7.0  # px per character at the SVG's 11px sans-serif label font
NODE_HEIGHT = 26.0
NODE_PADDING = 18.0
GAP_X = 14.0
GAP_Y = 34.0
MARGIN = 10.0


@dataclass(frozen=True)
class Box:
    x: float  # left
    y: float  # top
    width: float
    height: float

    @property
    def center_x(self) -> float:
        return self.x + self.width / 2


@dataclass(frozen=True)
class Layout:
    boxes: list[Box]  # one per node, in node order
    width: float
    height: float


def layered_layout(labels: Sequence[str], edges: Sequence[tuple[int, int]]) -> Layout:
    inputs: list[list[int]] = [[] for _ in labels]
    for source, target in edges:
        if 0 <= source < target < len(labels):  # graph order is topological: edges go forward
            inputs[target].append(source)
    layer = [0] * len(labels)
    for node, sources in enumerate(inputs):
        layer[node] = max((layer[s] + 1 for s in sources), default=0)
    layers: list[list[int]] = [[] for _ in range(max(layer, default=-1) + 1)]
    position: dict[int, float] = {}
    for node in range(len(labels)):
        layers[layer[node]].append(node)
    for row in layers:
        # Under the mean position of its inputs, graph order breaking ties.
        def barycenter(node: int) -> tuple[float, int]:
            placed = [position[s] for s in inputs[node] if s in position]
            return (sum(placed) / len(placed) if placed else float(node), node)

        row.sort(key=barycenter)
        for index, node in enumerate(row):
            position[node] = float(index)
    widths = [len(label) * CHAR_WIDTH + NODE_PADDING for label in labels]
    row_widths = [sum(widths[n] for n in row) + GAP_X * max(len(row) - 1, 0) for row in layers]
    width = max(row_widths, default=0.0) + 2 * MARGIN
    boxes: list[Box | None] = [None] * len(labels)
    for number, row in enumerate(layers):
        x = (width - row_widths[number]) / 2  # each layer centred
        y = MARGIN + number * (NODE_HEIGHT + GAP_Y)
        for node in row:
            boxes[node] = Box(x, y, widths[node], NODE_HEIGHT)
            x += widths[node] + GAP_X
    height = 2 * MARGIN + len(layers) * NODE_HEIGHT + max(len(layers) - 1, 0) * GAP_Y
    return Layout([box for box in boxes if box is not None], width, height)
