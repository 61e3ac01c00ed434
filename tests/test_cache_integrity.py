"""Issue 9: a cache entry is bound to its key, only regular files are read, and a broken cache is
a warning, never a crash. Real files, FIFOs and symlinks; the CLI as real subprocesses."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cache.store import BlobStore

from helpers import (
    TRACEBACK,
    SharedBuild,
    lowerd_without_torch,
)


def key_for(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def entry_path(root: Path, key: str, kind: str = "blob") -> Path:
    name = key if kind == "blob" else f"{key}.{kind}"
    return root / "blobs" / key[:2] / name


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fail, rather than hang the suite, if a read blocks (the old store opened FIFOs blocking)."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("a cache read blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# An entry is bound to its key and kind -----------------------------------------------------


def test_an_entry_copied_over_another_is_a_miss_and_removed(root: Path) -> None:
    store = BlobStore(root)
    a, b = key_for("a"), key_for("b")
    store.put(a, b"blob of a")
    store.put(b, b"blob of b")
    shutil.copyfile(entry_path(root, a), entry_path(root, b))  # `cp blobs/<a> blobs/<b>`

    assert store.get(b) is None
    assert not entry_path(root, b).exists()
    assert store.corrupt_removed == 1
    assert store.get(a) == b"blob of a"


def test_an_entry_of_one_kind_is_not_served_for_another(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("program")
    assert store.put(key, b"observer qparams", kind="qparams")
    assert store.get(key) is None  # the blob kind: its own file, never written
    assert store.get(key, kind="qparams") == b"observer qparams"

    shutil.copyfile(entry_path(root, key, "qparams"), entry_path(root, key))
    assert store.get(key) is None
    assert not entry_path(root, key).exists()
    assert store.corrupt_removed == 1
    assert store.get(key, kind="qparams") == b"observer qparams"


def test_an_entry_of_the_old_format_is_a_quiet_miss(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"x")
    path = entry_path(root, key)
    path.write_bytes(b"LWB1" + hashlib.sha256(b"payload").digest() + b"payload")
    assert store.get(key) is None
    assert not path.exists()
    assert store.corrupt_removed == 0  # an upgrade, not damage
    assert store.problems == []


def test_a_frame_of_another_schema_is_a_miss(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"x")
    path = entry_path(root, key)
    body = struct.pack(">HHH", 3, 4, 64) + b"blob" + key.encode() + b"x"
    path.write_bytes(b"LWB2" + hashlib.sha256(body).digest() + body)
    assert store.get(key) is None
    assert not path.exists()


# Only regular files are read -----------------------------------------------------------------


def test_a_symlink_at_an_entry_path_is_removed_not_its_target(root: Path) -> None:
    store = BlobStore(root)
    a, b = key_for("a"), key_for("b")
    store.put(a, b"blob of a")
    store.put(b, b"blob of b")
    target_bytes = entry_path(root, a).read_bytes()
    entry_path(root, b).unlink()
    entry_path(root, b).symlink_to(entry_path(root, a))

    assert store.get(b) is None
    assert not entry_path(root, b).is_symlink()
    assert entry_path(root, a).read_bytes() == target_bytes
    assert store.get(a) == b"blob of a"


def test_a_fifo_at_an_entry_path_is_a_miss_and_does_not_block(root: Path, no_hang: None) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"x")
    path = entry_path(root, key)
    path.unlink()
    os.mkfifo(path)

    assert store.get(key) is None
    assert not path.exists()
    assert store.put(key, b"x") and store.get(key) == b"x"


def test_a_folder_at_an_entry_path_is_a_miss_and_reported(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"x")
    path = entry_path(root, key)
    path.unlink()
    path.mkdir()
    assert store.get(key) is None
    assert [problem.path for problem in store.problems] == [path]


# A broken cache is a warning, not a crash ----------------------------------------------------


def test_a_cache_root_that_is_a_file_degrades_every_operation(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_bytes(b"not a folder")
    store = BlobStore(not_a_folder)

    assert store.get(key_for("a")) is None
    assert store.put(key_for("a"), b"x") is False
    stats = store.stats()
    assert (stats.entries, stats.total_bytes, stats.temp_files) == (0, 0, 0)
    assert stats.problems
    assert store.gc(0).removed_entries == 0
    assert store.clear() == 0
    assert store.check() is not None
    assert store.warnings() == [f"cache at {not_a_folder} is unusable (Not a directory)"]
    assert not_a_folder.read_bytes() == b"not a folder"


def test_a_shard_that_is_a_file_costs_only_its_keys(root: Path) -> None:
    store = BlobStore(root)
    kept = key_for("kept")
    store.put(kept, b"x")
    blocked = next(key_for(str(i)) for i in range(1000) if key_for(str(i))[:2] != kept[:2])
    (root / "blobs" / blocked[:2]).write_bytes(b"in the way")

    assert store.put(blocked, b"y") is False
    assert store.get(blocked) is None
    stats = store.stats()
    assert stats.entries == 1
    assert store.check() is None
    shard = root / "blobs" / blocked[:2]
    assert f"cache: cannot read {shard} (Not a directory)" in store.warnings()
    assert store.get(kept) == b"x"


def test_temp_files_are_counted_and_clear_removes_them_all(root: Path) -> None:
    store = BlobStore(root)
    store.put(key_for("a"), b"x")
    shard = entry_path(root, key_for("a")).parent
    (shard / ".tmp-killed").write_bytes(b"k" * 1000)
    (shard / ".tmp-fresh").write_bytes(b"f" * 24)

    stats = store.stats()
    assert (stats.entries, stats.temp_files, stats.temp_bytes) == (1, 2, 1024)
    assert store.clear() == 1
    assert list(shard.iterdir()) == []


# The command line ----------------------------------------------------------------------------


def test_cache_commands_on_a_cache_that_is_a_file(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_bytes(b"")
    for args in (["cache", "stats"], ["cache", "gc"], ["cache", "clear"]):
        run = lowerd_without_torch(tmp_path, not_a_folder, *args)
        assert run.returncode == 1, run.log
        assert TRACEBACK not in run.stderr, run.log
        assert run.stderr.splitlines() == [
            f"lowerd: cache at {not_a_folder} is unusable (Not a directory)"
        ], run.log


def test_cache_stats_reports_temp_files_and_what_it_could_not_read(root: Path) -> None:
    store = BlobStore(root)
    store.put(key_for("a"), b"x")
    (entry_path(root, key_for("a")).parent / ".tmp-killed").write_bytes(b"k" * 2048)
    (root / "blobs" / "zz").mkdir()  # not a shard name: ignored
    blocked = next(key_for(str(i)) for i in range(1000) if key_for(str(i))[:2] != key_for("a")[:2])
    (root / "blobs" / blocked[:2]).write_bytes(b"in the way")

    stats = lowerd_without_torch(root.parent, root, "cache", "stats")
    assert stats.returncode == 0, stats.log
    assert "entries: 1" in stats.stdout.splitlines(), stats.log
    assert "temp:    1 files (2 KiB)" in stats.stdout.splitlines(), stats.log
    assert stats.stderr.splitlines() == [
        f"lowerd: warning: cache: cannot read {root / 'blobs' / blocked[:2]} (Not a directory)"
    ], stats.log

    clear = lowerd_without_torch(root.parent, root, "cache", "clear")
    assert clear.returncode == 0, clear.log
    assert clear.stdout.startswith("removed 1 entries"), clear.log
    assert BlobStore(root).stats().temp_files == 0


@pytest.mark.e2e
def test_build_with_a_cache_that_is_a_file_warns_and_writes_the_pte(
    named_build: SharedBuild,
) -> None:
    """`lowerd build tiny_linear --no-daemon --json` with a file for its cache folder: the run is
    conftest.py's named_build, which tests/test_cli.py also reads as a named target's build."""
    project, not_a_folder, run = named_build.root, named_build.cache, named_build.run

    assert run.returncode == 0, run.log
    assert TRACEBACK not in run.stderr, run.log
    warning = f"cache at {not_a_folder} is unusable (Not a directory); built without it"
    assert run.json()["warnings"] == [warning]
    # stderr also carries torch's own chatter; lowerd says it once
    lowerd_lines = [line for line in run.stderr.splitlines() if line.startswith("lowerd")]
    assert lowerd_lines == [f"lowerd: {warning}"], run.log
    assert (project / "build" / "tiny_linear.pte").is_file()


# An entry copied over another's is not served to a build: tests/test_cli.py's
# test_a_poisoned_entry_is_not_served_to_a_build, whose rebuild after damage to the cache
# (an altered entry there too) checks it without paying the imports of a run of its own.
