"""Tensors as plain bytes, for the memos that keep torch's results in the content-addressed store
(qparam_memo.py's observer searches, intx_memo.py's quantized weights): a tensor by content in a
key, CPU tensors to msgpack and back, bit for bit. And a tensor's wire form (PlainTensor), so
that a field typed torch.Tensor crosses a process boundary through project/wire.py's one
converter: the runtime's requests and answers (runtime_run.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgpack
import torch

from lowerd.project.wire import wire_form

# A tensor by content: dtype, device, shape and its bytes.
TensorKey = tuple[str, str, tuple[int, ...], bytes]


def tensor_key(tensor: torch.Tensor) -> TensorKey:
    return (str(tensor.dtype), str(tensor.device), tuple(tensor.shape), tensor_bytes(tensor))


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's elements in row-major order, as bytes (whatever its strides)."""
    flat = tensor.detach().contiguous().reshape(-1)
    return bytes(flat.view(torch.uint8).numpy()) if flat.numel() else b""


def encode_tensors(tensors: Sequence[torch.Tensor]) -> bytes | None:
    """The tensors as plain data, or None if they are not all plain CPU tensors."""
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in tensors):
        return None
    plain = [[str(t.dtype), list(t.shape), tensor_bytes(t)] for t in tensors]
    packed: bytes = msgpack.packb({"tensors": plain}, use_bin_type=True)
    return packed


def decode_tensors(payload: bytes) -> tuple[torch.Tensor, ...] | None:
    """The stored tensors (contiguous, each with storage of its own), or None for a payload of
    another shape."""
    try:
        plain = msgpack.unpackb(payload, raw=False)["tensors"]
        return tuple(_tensor(dtype, shape, data) for dtype, shape, data in plain)
    except (ValueError, KeyError, TypeError, msgpack.UnpackException):
        return None


def _tensor(dtype_name: str, shape: list[int], data: bytes) -> torch.Tensor:
    dtype = getattr(torch, dtype_name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype: {dtype_name}")
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape).clone()


@dataclass(frozen=True)
class PlainTensor:
    """A CPU tensor on a wire: its dtype's name ("torch.float32"), its shape and its elements'
    bytes in row-major order."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes


def plain_tensor(tensor: torch.Tensor) -> PlainTensor:
    return PlainTensor(str(tensor.dtype), tuple(tensor.shape), tensor_bytes(tensor))


def tensor_of(plain: PlainTensor) -> torch.Tensor:
    """The tensor back, with storage of its own; ValueError for a dtype torch does not have or
    bytes that do not fill the shape."""
    try:
        tensor = _tensor(plain.dtype, list(plain.shape), plain.data)
    except RuntimeError as error:  # torch's word for bytes of another size
        raise ValueError(f"not a {plain.dtype} tensor of shape {plain.shape}: {error}") from error
    if tensor.numel() * tensor.element_size() != len(plain.data):
        raise ValueError(f"{len(plain.data)} bytes are no {plain.dtype} tensor of {plain.shape}")
    return tensor


wire_form(torch.Tensor, PlainTensor, plain_tensor, tensor_of)
