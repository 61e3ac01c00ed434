"""`lowerd compare`'s table: one column per backend, one row per fact, then the ops each backend
left on the CPU (most first) and each failed backend's error.

    refused, one backend at a time
                       XNNPACK                   Vulkan
    coverage           50 %                      83 %
    ops on backend     2 of 4                    5 of 6
    partitions         2                         2
    .pte               4.2 KiB                   4.2 KiB
    cache              2 hits                    2 misses
    seconds            0.9                       15.9
    not delegated      1× aten.pow.Tensor_Scalar  1× aten.cumsum.default
                       1× aten.cumsum.default
"""

from __future__ import annotations

from lowerd.cache.location import format_size
from lowerd.project.compare_result import BackendComparison, CompareResult

# Ops left on the CPU shown per backend; the JSON document has all of them.
TOP_OPS = 5
GAP = 2


def format_compare(compared: CompareResult, seconds: float) -> str:
    columns = compared.backends
    rows: list[tuple[str, list[str]]] = [
        ("coverage", [_when_ok(c, f"{c.coverage_percent} %") for c in columns]),
        ("ops on backend", [_when_ok(c, f"{c.ops_delegated} of {c.ops}") for c in columns]),
        ("partitions", [_when_ok(c, str(c.partitions)) for c in columns]),
        (".pte", [_when_ok(c, _size(c.pte_bytes)) for c in columns]),
        ("cache", [_when_ok(c, _cache(c)) for c in columns]),
        ("seconds", [f"{c.seconds:.1f}" for c in columns]),
    ]
    not_delegated = [_not_delegated(c) for c in columns]
    depth = max((len(cells) for cells in not_delegated), default=0)
    for index in range(depth):
        cells = [cells[index] if index < len(cells) else "" for cells in not_delegated]
        rows.append(("not delegated" if index == 0 else "", cells))
    header = ("", [c.display for c in columns])
    widths = _widths([header, *rows])
    lines = [f"{compared.target}, one backend at a time"]
    lines += [_line(label, cells, widths) for label, cells in (header, *rows)]
    for column in columns:
        if column.error is not None:
            where = f" ({column.error.file}:{column.error.line})" if column.error.file else ""
            lines.append(f"{column.display}: {column.error.kind}{where}: {column.error.message}")
    built = sum(1 for c in columns if c.ok)
    lines.append(f"\n{built} of {len(columns)} backends compared in {seconds:.1f} s")
    return "\n".join(lines) + "\n"


def _when_ok(column: BackendComparison, text: str) -> str:
    return text if column.ok else "error"


def _size(pte_bytes: int | None) -> str:
    return format_size(pte_bytes) if pte_bytes is not None else "-"


def _cache(column: BackendComparison) -> str:
    if column.reused == "up-to-date":
        return "up to date"
    hits, misses = column.cache.hits, column.cache.misses
    if not hits and not misses:
        return "-"
    parts = [f"{hits} hit{'s' if hits != 1 else ''}"] if hits else []
    parts += [f"{misses} miss{'es' if misses != 1 else ''}"] if misses else []
    return ", ".join(parts)


def _not_delegated(column: BackendComparison) -> list[str]:
    if not column.ok:
        return []
    if not column.not_delegated:
        return ["none"]
    shown = [f"{group.count}× {group.op}" for group in column.not_delegated[:TOP_OPS]]
    left = column.not_delegated[TOP_OPS:]
    if left:
        shown.append(f"{len(left)} more ops")
    return shown


def _widths(rows: list[tuple[str, list[str]]]) -> list[int]:
    labels = max(len(label) for label, _ in rows)
    cells = [max(len(cells[i]) for _, cells in rows) for i in range(len(rows[0][1]))]
    return [labels, *cells]


def _line(label: str, cells: list[str], widths: list[int]) -> str:
    padded = [label.ljust(widths[0])] + [c.ljust(w) for c, w in zip(cells, widths[1:], strict=True)]
    return (" " * GAP).join(padded).rstrip()
