"""Frames read from a buffer as a non-blocking pipe fills it: whole frames only, in order."""

from __future__ import annotations

import pytest

from lowerd.worker.frames import FrameError, encode_frame, take_frame


def test_take_frame_waits_for_a_whole_frame_and_takes_only_it() -> None:
    first, second = encode_frame({"type": "progress"}), encode_frame({"type": "result"})
    buffer = bytearray(first[:2])
    assert take_frame(buffer) is None  # not even the length yet
    buffer += first[2:-1]
    assert take_frame(buffer) is None and len(buffer) == len(first) - 1
    buffer += first[-1:] + second[:3]
    assert take_frame(buffer) == {"type": "progress"}
    assert buffer == second[:3]
    buffer += second[3:]
    assert take_frame(buffer) == {"type": "result"} and buffer == bytearray()


def test_a_garbled_or_non_map_frame_is_an_error() -> None:
    def frame(payload: bytes) -> bytearray:
        return bytearray(len(payload).to_bytes(4, "big") + payload)

    with pytest.raises(FrameError, match="undecodable"):
        take_frame(frame(b"\xc1"))  # 0xc1 is never valid msgpack
    with pytest.raises(FrameError, match="not a map"):
        take_frame(frame(b"\x93\x01\x02\x03"))  # the array [1, 2, 3]
