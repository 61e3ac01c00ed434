"""lowerd's one atomic write: the whole new file or the old one, and no temp file left behind."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cache import atomic
from lowerd.cache.atomic import write_atomic


def test_writes_the_file_with_the_mode_asked_for(tmp_path: Path) -> None:
    private, shared = tmp_path / "status.json", tmp_path / "model.pte"
    write_atomic(private, b"{}")
    write_atomic(shared, [b"head", b"payload"], mode=0o644)
    assert private.read_bytes() == b"{}" and shared.read_bytes() == b"headpayload"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(shared.stat().st_mode) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["model.pte", "status.json"]


def test_a_failed_rename_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()  # a folder in the way: the rename over it fails
    with pytest.raises(OSError):
        write_atomic(tmp_path / "out", b"new")
    assert os.listdir(tmp_path) == ["out"] and (tmp_path / "out").is_dir()


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.bin"
    path.write_bytes(b"old")

    def chunks() -> Iterator[bytes]:
        yield b"partial"
        raise KeyboardInterrupt  # an interrupt mid-write too, not only an OSError

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, chunks())
    assert os.listdir(tmp_path) == ["state.bin"] and path.read_bytes() == b"old"

    def full_disk(fd: int, mode: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fchmod", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_atomic(path, b"new")
    assert os.listdir(tmp_path) == ["state.bin"] and path.read_bytes() == b"old"
