"""Length-prefixed msgpack frames: how a build worker streams events to the daemon over a pipe,
and how CLI clients and the daemon talk over its socket (daemon/rpc.py).

msgpack only, never pickle: nothing a worker (running user code) or a client writes can execute in
the daemon.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, BinaryIO

import msgpack

if TYPE_CHECKING:  # the CLI client reads frames without paying for asyncio's import
    import asyncio

_LENGTH = 4
MAX_FRAME = 64 * 1024 * 1024  # a report of a huge model is megabytes; anything past this is junk


class FrameError(Exception):
    pass


def encode_frame(message: dict[str, Any]) -> bytes:
    payload: bytes = msgpack.packb(message, use_bin_type=True)
    return len(payload).to_bytes(_LENGTH, "big") + payload


def write_frame(stream: BinaryIO, message: dict[str, Any]) -> None:
    stream.write(encode_frame(message))
    stream.flush()


def _frame_length(header: bytes) -> int:
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME:
        raise FrameError(f"frame of {length} bytes exceeds {MAX_FRAME}")
    return length


def _decode_payload(payload: bytes) -> dict[str, Any]:
    try:
        message = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as error:
        raise FrameError(f"undecodable frame: {error}") from error
    if not isinstance(message, dict):
        raise FrameError(f"frame is a {type(message).__name__}, not a map")
    return message


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    """The next message from a blocking stream; None at its end, or if it ends mid-frame."""
    header = stream.read(_LENGTH)
    if len(header) < _LENGTH:
        return None
    length = _frame_length(header)
    payload = stream.read(length)
    if len(payload) < length:
        return None
    return _decode_payload(payload)


async def read_frame_async(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message from an asyncio stream; None at its end, or if it ends mid-frame."""
    import asyncio

    try:
        header = await reader.readexactly(_LENGTH)
        return _decode_payload(await reader.readexactly(_frame_length(header)))
    except asyncio.IncompleteReadError:
        return None


def take_frame(buffer: bytearray) -> dict[str, Any] | None:
    """The first message in buffer, taken out of it; None until buffer holds a whole frame. For a
    reader of a non-blocking pipe, which appends to buffer whatever arrives."""
    if len(buffer) < _LENGTH:
        return None
    length = _frame_length(bytes(buffer[:_LENGTH]))
    if len(buffer) < _LENGTH + length:
        return None
    message = _decode_payload(bytes(buffer[_LENGTH : _LENGTH + length]))
    del buffer[: _LENGTH + length]
    return message
