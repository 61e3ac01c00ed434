"""PreprocessResult <-> bytes, with msgpack only: a cache entry can never execute code on load."""

from __future__ import annotations

from typing import Any

import msgpack
from executorch.exir._serialize._named_data_store import NamedDataStoreOutput
from executorch.exir._serialize.data_serializer import DataEntry
from executorch.exir.backend.backend_details import PreprocessResult
from executorch.exir.scalar_type import ScalarType
from executorch.exir.tensor_layout import TensorLayout


class NotPlainData(Exception):
    """The result holds something msgpack cannot carry faithfully; it is not cached."""


def encode_results(results: list[PreprocessResult], handles: tuple[int, ...]) -> bytes:
    """The results of one preprocess call, with the debug handles they were built with."""
    document = {"handles": list(handles), "results": [_encode_result(r) for r in results]}
    packed: bytes = msgpack.packb(document, use_bin_type=True)
    return packed


def decode_results(payload: bytes) -> tuple[list[PreprocessResult], tuple[int, ...]]:
    # Debug-handle maps may be keyed by int; msgpack refuses non-str keys unless told.
    raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    return [_decode_result(r) for r in raw["results"]], tuple(raw["handles"])


def _encode_result(result: PreprocessResult) -> dict[str, Any]:
    if result._delegate_info_meta is not None:
        raise NotPlainData("delegate info meta is an arbitrary object")
    return {
        "processed_bytes": bytes(result.processed_bytes),
        "debug_handle_map": _encode_handle_map(result.debug_handle_map),
        "data_store": _encode_data_store(result.data_store_output),
    }


def _decode_result(raw: dict[str, Any]) -> PreprocessResult:
    return PreprocessResult(
        processed_bytes=raw["processed_bytes"],
        debug_handle_map=_decode_handle_map(raw["debug_handle_map"]),
        data_store_output=_decode_data_store(raw["data_store"]),
    )


def _encode_handle_map(handle_map: dict[int, Any] | None) -> list[Any] | None:
    # Pairs, not a map, so int and str keys come back as they went in; the value's container
    # type is kept too, since ExecuTorch passes it on to ETRecord as it is.
    if handle_map is None:
        return None
    pairs = []
    for key, handles in handle_map.items():
        if not isinstance(key, (int, str)):
            raise NotPlainData(f"debug handle key {key!r}")
        kind = "tuple" if isinstance(handles, tuple) else "list"
        pairs.append([key, kind, _plain_ints(handles)])
    return pairs


def _decode_handle_map(pairs: list[Any] | None) -> dict[int, Any] | None:
    if pairs is None:
        return None
    return {
        key: tuple(handles) if kind == "tuple" else list(handles) for key, kind, handles in pairs
    }


def _plain_ints(values: Any) -> list[int]:
    if not isinstance(values, (list, tuple)) or not all(type(v) is int for v in values):
        raise NotPlainData(f"debug handles {values!r}")
    return list(values)


def _encode_data_store(store: NamedDataStoreOutput | None) -> dict[str, Any] | None:
    if store is None:
        return None
    buffers = []
    for buffer in store.buffers:
        if not isinstance(buffer, (bytes, bytearray)):
            raise NotPlainData(f"named data buffer of type {type(buffer).__name__}")
        buffers.append(bytes(buffer))
    return {
        "buffers": buffers,
        "pte_data": _encode_entries(store.pte_data),
        "external_data": {name: _encode_entries(e) for name, e in store.external_data.items()},
    }


def _decode_data_store(raw: dict[str, Any] | None) -> NamedDataStoreOutput | None:
    if raw is None:
        return None
    return NamedDataStoreOutput(
        buffers=list(raw["buffers"]),
        pte_data=_decode_entries(raw["pte_data"]),
        external_data={name: _decode_entries(e) for name, e in raw["external_data"].items()},
    )


def _encode_entries(entries: dict[str, DataEntry]) -> dict[str, Any]:
    return {
        key: [entry.buffer_index, entry.alignment, _encode_layout(entry.tensor_layout)]
        for key, entry in entries.items()
    }


def _decode_entries(raw: dict[str, Any]) -> dict[str, DataEntry]:
    return {
        key: DataEntry(buffer_index=index, alignment=alignment, tensor_layout=_decode_layout(lay))
        for key, (index, alignment, lay) in raw.items()
    }


def _encode_layout(layout: TensorLayout | None) -> list[Any] | None:
    if layout is None:
        return None
    return [int(layout.scalar_type), list(layout.sizes), list(layout.dim_order)]


def _decode_layout(raw: list[Any] | None) -> TensorLayout | None:
    if raw is None:
        return None
    scalar_type, sizes, dim_order = raw
    return TensorLayout(scalar_type=ScalarType(scalar_type), sizes=sizes, dim_order=dim_order)
