"""Re-number the debug handles of a cached preprocess result, exactly as a fresh preprocess would.

ExecuTorch numbers debug handles across the whole graph, so inserting one op shifts the handles of
every partition after it although their contents did not change. A partition cached under its
position-relative key (partition_key, stable naming) is rebased onto the new handles:

- XNNPACK writes each node's handle into `XNode.debug_handle` (uint32) of its flatbuffer blob.
  flatc omits a field equal to its default (0) and its layout does not depend on a non-zero
  scalar's value, so overwriting a present non-zero u32 with another non-zero u32 yields the bytes
  a fresh preprocess writes. XNNPACK's passes give nodes they create the marker 65535; those stay.

Vulkan is not rebased. Its blob holds local ids, and its `debug_handle_map` is not made of the
partition's handles either: Vulkan's passes retrace the program and number handles afresh (seen on
executorch 1.5.1: the map read {0: (5,), 1: (6,), ...} whatever the partition's handles were).
Mapping those through the partition's handles would be a guess, so Vulkan partitions are keyed
with their handles as they are (exact naming) and reuse only when nothing before them moved.

Anything else, or any case where exactness is not certain, raises CannotRebase: the caller then
preprocesses afresh. A guess is never returned.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from executorch.exir.backend.backend_details import PreprocessResult

XNNPACK_NO_HANDLE = 65535  # xnnpack_preprocess.DEFAULT_DEBUG_HANDLE

# Header (backends/xnnpack/serialization/xnnpack_graph_serialize.py: XNNHeader)
_XNN_MAGIC = slice(4, 8)
_XNN_FLATBUFFER_OFFSET = slice(10, 14)
_XNN_FLATBUFFER_SIZE = slice(14, 18)
# Field slots (backends/xnnpack/serialization/schema.fbs): XNNGraph.xnodes is slot 1 (after
# version); XNode's union takes slots 0 (type) and 1 (value), so debug_handle is slot 2.
_XNNGRAPH_XNODES_SLOT = 1
_XNODE_DEBUG_HANDLE_SLOT = 2


class CannotRebase(Exception):
    pass


Handles = tuple[int, ...]


def rebase(
    backend: str, results: list[PreprocessResult], built_with: Handles, wanted: Handles
) -> list[PreprocessResult]:
    if built_with == wanted:
        return results
    if len(built_with) != len(wanted) or len(set(wanted)) != len(wanted):
        raise CannotRebase("the partitions' handles do not correspond one to one")
    if any(h in (0, XNNPACK_NO_HANDLE) for h in (*built_with, *wanted)):
        raise CannotRebase("a handle of 0 or 65535 cannot be told from a default")
    rebaser = _REBASERS.get(backend)
    if rebaser is None:
        raise CannotRebase(f"no known way to rebase {backend} blobs")
    mapping = dict(zip(built_with, wanted, strict=True))
    return [rebaser(result, mapping) for result in results]


def _rebase_xnnpack(result: PreprocessResult, mapping: dict[int, int]) -> PreprocessResult:
    return dataclasses.replace(
        result,
        processed_bytes=rebase_xnnpack_blob(result.processed_bytes, mapping),
        debug_handle_map=_rebase_handle_map(result.debug_handle_map, mapping),
    )


_REBASERS: dict[str, Callable[[PreprocessResult, dict[int, int]], PreprocessResult]] = {
    "XnnpackBackend": _rebase_xnnpack,
}
# Backends whose partitions are keyed by position (names and handles): their blobs hold no node
# names, and their handles can be rebased.
REBASABLE_BACKENDS = frozenset(_REBASERS)


def _rebase_handle_map(
    handle_map: dict[int, Any] | None, mapping: dict[int, int]
) -> dict[int, Any] | None:
    if not handle_map:
        return handle_map
    rebased = {}
    for identifier, handles in handle_map.items():
        if any(h not in mapping for h in handles):
            raise CannotRebase(f"handle map entry {identifier!r} has unknown handles")
        # get_delegate_mapping() sorts each entry's handles; do as it does.
        renumbered = sorted(mapping[h] for h in handles)
        rebased[identifier] = tuple(renumbered) if isinstance(handles, tuple) else renumbered
    return rebased


def rebase_xnnpack_blob(blob: bytes, mapping: dict[int, int]) -> bytes:
    try:
        return _patch_xnnpack_blob(blob, mapping)
    except struct.error as error:  # offsets that lead outside the blob: not a blob we know
        raise CannotRebase(f"malformed XNNPACK flatbuffer: {error}") from error


def _patch_xnnpack_blob(blob: bytes, mapping: dict[int, int]) -> bytes:
    if blob[_XNN_MAGIC] != b"XH00":
        raise CannotRebase("not an XNNPACK blob with an XH00 header")
    base = _u32(blob, _XNN_FLATBUFFER_OFFSET.start)
    size = _u32(blob, _XNN_FLATBUFFER_SIZE.start)
    if base + size > len(blob):
        raise CannotRebase("flatbuffer runs past the blob")
    patched = bytearray(blob)
    graph = base + _u32(blob, base)
    xnodes = _field_position(blob, graph, _XNNGRAPH_XNODES_SLOT)
    if xnodes is None:
        return bytes(patched)
    vector = xnodes + _u32(blob, xnodes)
    for i in range(_u32(blob, vector)):
        element = vector + 4 + 4 * i
        _rebase_xnode(blob, patched, element + _u32(blob, element), mapping)
    return bytes(patched)


def _rebase_xnode(blob: bytes, patched: bytearray, table: int, mapping: dict[int, int]) -> None:
    position = _field_position(blob, table, _XNODE_DEBUG_HANDLE_SLOT)
    if position is None:
        raise CannotRebase("an XNode without a debug handle (0) cannot take a non-zero one")
    handle = _u32(blob, position)
    if handle == XNNPACK_NO_HANDLE:
        return
    if handle not in mapping:
        raise CannotRebase(f"XNode handle {handle} is not one of the partition's handles")
    struct.pack_into("<I", patched, position, mapping[handle])


def _field_position(data: bytes, table: int, slot: int) -> int | None:
    """Where a table's field lives, or None when flatc left it out (it equals its default)."""
    vtable = table - struct.unpack_from("<i", data, table)[0]
    vtable_size = struct.unpack_from("<H", data, vtable)[0]
    entry = 4 + 2 * slot
    if entry + 2 > vtable_size:
        return None
    offset = struct.unpack_from("<H", data, vtable + entry)[0]
    return table + offset if offset else None


def _u32(data: bytes, position: int) -> int:
    if position + 4 > len(data):
        raise CannotRebase("offset past the end of the blob")
    value: int = struct.unpack_from("<I", data, position)[0]
    return value
