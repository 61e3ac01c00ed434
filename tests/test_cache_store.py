"""The blob store on a real filesystem: verification, eviction, permissions and concurrent use."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from lowerd.cache.location import DEFAULT_MAX_BYTES, default_cache_dir, format_size, parse_size
from lowerd.cache.store import MAGIC, BlobStore

KEY_DIGITS = 64  # key_for's keys: sha256 hex digests
# MAGIC, sha256, then the frame: schema, kind and key lengths (3 x u16), kind "blob", the key.
HEADER = len(MAGIC) + 32 + 6 + len("blob") + KEY_DIGITS


def key_for(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def entry_path(root: Path, key: str) -> Path:
    return root / "blobs" / key[:2] / key


def set_mtime(path: Path, mtime: float) -> None:
    os.utime(path, (mtime, mtime))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    # Not created yet: the store must make its own directories.
    return tmp_path / "cache"


def test_round_trip(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"delegate blob")
    assert store.contains(key)
    assert store.get(key) == b"delegate blob"


def test_empty_payload_round_trips(root: Path) -> None:
    store = BlobStore(root)
    store.put(key_for("empty"), b"")
    assert store.get(key_for("empty")) == b""


def test_put_replaces_an_existing_entry(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"old")
    store.put(key, b"new")
    assert store.get(key) == b"new"
    assert store.stats().entries == 1


def test_missing_entry_is_a_miss_even_without_a_store_directory(root: Path) -> None:
    store = BlobStore(root)
    assert store.get(key_for("a")) is None
    assert not store.contains(key_for("a"))
    assert store.stats().entries == 0
    assert store.gc(0).removed_entries == 0
    assert store.clear() == 0
    assert not root.exists()


def test_entry_file_binds_the_payload_to_its_schema_kind_and_key(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"payload")
    body = struct.pack(">HHH", 2, 4, KEY_DIGITS) + b"blob" + key.encode() + b"payload"
    expected = MAGIC + hashlib.sha256(body).digest() + body
    assert MAGIC == b"LWB2"
    assert entry_path(root, key).read_bytes() == expected
    assert len(expected) == HEADER + len(b"payload")


def flip_payload_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x01])


def flip_digest_byte(data: bytes) -> bytes:
    return data[:10] + bytes([data[10] ^ 0x80]) + data[11:]


def truncate_payload(data: bytes) -> bytes:
    return data[: HEADER + 3]


def truncate_header(data: bytes) -> bytes:
    return data[: HEADER - 1]


def empty(data: bytes) -> bytes:
    return b""


def wrong_magic(data: bytes) -> bytes:
    return b"LWB0" + data[len(MAGIC) :]


@pytest.mark.parametrize(
    "damage",
    [flip_payload_byte, flip_digest_byte, truncate_payload, truncate_header, empty, wrong_magic],
)
def test_damaged_entry_is_a_miss_and_removed(root: Path, damage: Callable[[bytes], bytes]) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"some payload bytes")
    path = entry_path(root, key)
    path.write_bytes(damage(path.read_bytes()))

    assert store.get(key) is None
    assert not path.exists()
    assert store.corrupt_removed == 1
    assert store.get(key) is None
    assert store.corrupt_removed == 1


@pytest.mark.parametrize(
    "key",
    [
        "",
        "0123456789abcde",  # 15 digits
        "0" * 129,
        "0123456789ABCDEF",
        "0123456789abcdeg",
        "../../../../etc/passwd",
        "0123456789abcdef/../x",
        "0123456789abcdef\n",
        " 0123456789abcdef",
    ],
)
def test_bad_keys_are_rejected(root: Path, key: str) -> None:
    store = BlobStore(root)
    with pytest.raises(ValueError, match="invalid cache key"):
        store.put(key, b"x")
    with pytest.raises(ValueError, match="invalid cache key"):
        store.get(key)
    with pytest.raises(ValueError, match="invalid cache key"):
        store.contains(key)
    assert not root.exists()


@pytest.mark.parametrize("length", [16, 128])
def test_key_length_bounds_are_accepted(root: Path, length: int) -> None:
    store = BlobStore(root)
    key = "a" * length
    store.put(key, b"x")
    assert store.get(key) == b"x"


def test_hit_refreshes_mtime(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"x")
    set_mtime(entry_path(root, key), 1000)
    store.get(key)
    assert entry_path(root, key).stat().st_mtime > 1000


def put_aged(store: BlobStore, names_and_mtimes: dict[str, float], size: int = 100) -> None:
    for name, mtime in names_and_mtimes.items():
        store.put(key_for(name), name.encode() * size)
        set_mtime(entry_path(store.root, key_for(name)), mtime)


def test_gc_evicts_least_recently_used_first(root: Path) -> None:
    store = BlobStore(root, max_bytes=None)
    put_aged(store, {"a": 1000, "b": 2000, "c": 3000, "d": 4000})
    entry_size = HEADER + 100
    store.get(key_for("a"))  # a hit makes "a" the most recently used

    result = store.gc(2 * entry_size)

    assert result.removed_entries == 2
    assert result.removed_bytes == 2 * entry_size
    assert result.remaining_bytes == 2 * entry_size
    assert [store.contains(key_for(name)) for name in "abcd"] == [True, False, False, True]


def test_gc_under_the_limit_removes_nothing(root: Path) -> None:
    store = BlobStore(root, max_bytes=None)
    put_aged(store, {"a": 1000, "b": 2000})
    result = store.gc(2 * (HEADER + 100))
    assert (result.removed_entries, result.removed_bytes) == (0, 0)
    assert result.remaining_bytes == 2 * (HEADER + 100)


def test_gc_zero_empties_the_store(root: Path) -> None:
    store = BlobStore(root, max_bytes=None)
    put_aged(store, {"a": 1000, "b": 2000})
    result = store.gc(0)
    assert result.removed_entries == 2
    assert result.remaining_bytes == 0
    assert store.stats().entries == 0


def test_gc_and_enforce_limit_default_to_the_store_limit(root: Path) -> None:
    entry_size = HEADER + 100
    store = BlobStore(root, max_bytes=entry_size)
    put_aged(store, {"a": 1000, "b": 2000, "c": 3000})
    assert store.gc().removed_entries == 2
    put_aged(store, {"d": 4000})
    assert store.enforce_limit().removed_entries == 1
    assert store.contains(key_for("d"))


def test_gc_without_limit_only_removes_stale_temp_files(root: Path) -> None:
    store = BlobStore(root, max_bytes=None)
    put_aged(store, {"a": 1000})
    shard = entry_path(root, key_for("a")).parent
    stale, fresh = shard / ".tmp-stale", shard / ".tmp-fresh"
    stale.write_bytes(b"half written")
    fresh.write_bytes(b"being written")
    set_mtime(stale, time.time() - 2 * 3600)

    result = store.gc()

    assert (result.removed_entries, result.remaining_bytes) == (0, HEADER + 100)
    assert not stale.exists()
    assert fresh.exists()
    assert store.stats().entries == 1


def test_clear_removes_every_entry(root: Path) -> None:
    store = BlobStore(root)
    for name in "abc":
        store.put(key_for(name), b"x")
    assert store.clear() == 3
    assert store.stats().entries == 0
    assert store.get(key_for("a")) is None
    assert store.clear() == 0


def test_stats_counts_whole_entry_files(root: Path) -> None:
    store = BlobStore(root, max_bytes=12345)
    store.put(key_for("a"), b"x" * 10)
    store.put(key_for("b"), b"y" * 20)
    stats = store.stats()
    assert (stats.root, stats.entries, stats.max_bytes) == (root, 2, 12345)
    assert stats.total_bytes == 2 * HEADER + 30


def test_stats_ignores_temp_and_foreign_files(root: Path) -> None:
    store = BlobStore(root)
    store.put(key_for("a"), b"x")
    shard = entry_path(root, key_for("a")).parent
    (shard / ".tmp-writer").write_bytes(b"partial")
    (shard / "notes.txt").write_bytes(b"not an entry")
    assert store.stats().entries == 1


def test_directories_and_files_are_private(root: Path) -> None:
    store = BlobStore(root)
    key = key_for("a")
    store.put(key, b"x")
    path = entry_path(root, key)
    for directory in (root, root / "blobs", path.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# Each worker waits for a line on stdin so all start together, then reports what it saw as JSON.
# Payloads are derived from the key, so any reader can tell a wrong or partial read.
WORKER = """
import json, sys
from pathlib import Path
from lowerd.cache.store import BlobStore

root, role, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
keys = sys.argv[4:]
store = BlobStore(root, max_bytes=None)
payload = {key: bytes.fromhex(key) * 2048 for key in keys}
sys.stdin.readline()
hits = wrong = 0
for _ in range(rounds):
    for key in keys:
        if role == "writer":
            store.put(key, payload[key])
        elif key == keys[0]:
            store.clear()
        else:
            store.gc(3 * len(payload[key]))
        got = store.get(key)
        hits += got is not None
        wrong += got is not None and got != payload[key]
print(json.dumps({"hits": hits, "wrong": wrong, "corrupt": store.corrupt_removed}))
"""


def test_concurrent_processes_never_read_a_partial_entry(root: Path) -> None:
    keys = [key_for(str(i)) for i in range(6)]
    roles = ["writer", "writer", "writer", "sweeper"]
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(root), role, "150", *keys],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for role in roles
    ]
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(b"go\n")
        worker.stdin.flush()
    reports = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err.decode()
        reports.append(json.loads(out))

    assert [report["wrong"] for report in reports] == [0] * len(roles)
    assert [report["corrupt"] for report in reports] == [0] * len(roles)
    assert sum(report["hits"] for report in reports[:3]) > 0
    survivor = BlobStore(root, max_bytes=None)
    for key in keys:
        got = survivor.get(key)
        assert got is None or got == bytes.fromhex(key) * 2048
    assert survivor.corrupt_removed == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1024", 1024),
        ("1024B", 1024),
        ("10k", 10 * 1024),
        ("10K", 10 * 1024),
        ("500M", 500 * 1024**2),
        ("500MB", 500 * 1024**2),
        ("2G", 2 * 1024**3),
        ("2gib", 2 * 1024**3),
        ("1.5G", 3 * 1024**3 // 2),
        ("1T", 1024**4),
        (" 2 GiB ", 2 * 1024**3),
        (".5k", 512),
        ("0.1k", 102),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "G", "-1G", "1.5.0G", "2X", "2GBB", "1iB", "1e3", "2 G B", "1.", "nan"]
)
def test_parse_size_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (1024**2 - 30, "1 MiB"),
        (3 * 1024**3 // 2, "1.5 GiB"),
        (DEFAULT_MAX_BYTES, "5 GiB"),
        (2048 * 1024**4, "2048 TiB"),
    ],
)
def test_format_size(n: int, expected: str) -> None:
    assert format_size(n) == expected


def test_format_size_rejects_negative() -> None:
    with pytest.raises(ValueError):
        format_size(-1)


def test_default_max_bytes_is_5_gib() -> None:
    assert DEFAULT_MAX_BYTES == parse_size("5G")


def test_default_cache_dir_prefers_lowerd_cache_dir() -> None:
    env = {"LOWERD_CACHE_DIR": "/srv/lowerd", "XDG_CACHE_HOME": "/xdg"}
    assert default_cache_dir(env) == Path("/srv/lowerd")


def test_default_cache_dir_falls_back_to_xdg_cache_home() -> None:
    env = {"LOWERD_CACHE_DIR": "", "XDG_CACHE_HOME": "/xdg"}
    assert default_cache_dir(env) == Path("/xdg/lowerd")


@pytest.mark.parametrize("xdg", [None, "", "relative/dir"])
def test_default_cache_dir_falls_back_to_home(xdg: str | None) -> None:
    env = {} if xdg is None else {"XDG_CACHE_HOME": xdg}
    assert default_cache_dir(env) == Path.home() / ".cache" / "lowerd"


def test_cache_layer_imports_nothing_but_the_stdlib() -> None:
    probe = (
        "import sys, lowerd.cache.store, lowerd.cache.location\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'executorch'}"
        " or m.startswith('lowerd.lowering')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True, text=True)
    assert out.stdout.strip() == "[]"
