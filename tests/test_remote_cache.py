"""Issue 14: the redis tier behind the local cache, against a real redis-server started per test.

Two "machines" are two copies of a project, each with its own local cache, sharing one redis.
Builds run in-process through the engine (as a worker runs them); the CLI case is a subprocess.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest

from lowerd.cache.entry import MAGIC, decode_entry, entry_head
from lowerd.cache.remote import PREFIX
from lowerd.cache.remote_stats import remote_counts
from lowerd.cli.report_table import format_report
from lowerd.lowering.build import build_target
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.errors import ConfigError
from lowerd.project.project_store import store_for
from lowerd.project.result import TargetResult
from lowerd.project.wire import encode

from helpers import PROJECTS, lowerd, write_pyproject
from stock import forget_project_modules, importable_copy, known_stock_digest
from testkit.redis_server import RedisServer, have_redis_server, redis_server

pytestmark = pytest.mark.skipif(not have_redis_server(), reason="needs redis-server")

TARGETS = ("tiny_linear", "two_methods")  # 1 and 2 partitions
PARTITIONS = 3
# Stock's bytes are compared by digest only: tests/stock_digests.json's (tests/known_stock.py).
TINY_LINEAR = ("models/tiny_linear.py:make", ["xnnpack"])
TWO_METHODS = ("models/two_methods.py:make", ["xnnpack"])


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as server:
        yield server


class Machine:
    """A checkout of the project with its own local cache, as a laptop or a CI runner has."""

    def __init__(self, root: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root, self.cache, self.monkeypatch = root, cache, monkeypatch

    def config(self) -> ProjectConfig:
        return load_config(self.root / "pyproject.toml")

    def build(self, name: str, **progress: object) -> TargetResult:
        self.monkeypatch.setenv("LOWERD_CACHE_DIR", str(self.cache))
        config = self.config()
        forget_project_modules(config.root)
        return build_target(config, config.targets[name], store_for(config), **progress)  # type: ignore[arg-type]

    def build_all(self) -> dict[str, TargetResult]:
        return {name: self.build(name) for name in TARGETS}


@pytest.fixture
def machines(
    tmp_path: Path, redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Machine, Machine]]:
    monkeypatch.delenv("LOWERD_CACHE_URL", raising=False)
    monkeypatch.delenv("LOWERD_CACHE_REMOTE", raising=False)
    with (
        importable_copy(PROJECTS / "basic", tmp_path / "a") as a,
        importable_copy(PROJECTS / "basic", tmp_path / "b") as b,
    ):
        for root in (a, b):
            set_remote(root, f'cache_url = "{redis.url}"')
        yield (
            Machine(a, tmp_path / "cache-a", monkeypatch),
            Machine(b, tmp_path / "cache-b", monkeypatch),
        )


def set_remote(root: Path, lines: str) -> None:
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    head, _, rest = text.partition('out_dir = "build"\n')
    pyproject.write_text(f'{head}out_dir = "build"\n{lines}\n{rest}')


def lowerd_keys(redis: RedisServer, kind: str = "blob") -> list[bytes]:
    return sorted(redis.client().scan_iter(match=f"{PREFIX}{kind}:*"))


def sha(result: TargetResult) -> str:
    assert result.status == "ok", result.error
    assert result.sha256 is not None
    return result.sha256


# Read through, write through ------------------------------------------------------------


def test_a_second_machine_is_served_every_partition_by_redis(
    machines: tuple[Machine, Machine], redis: RedisServer
) -> None:
    first, second = machines
    built = first.build_all()
    assert sum(r.cache.misses for r in built.values()) == PARTITIONS
    for result in built.values():
        remote = result.cache.remote_report
        assert remote is not None and remote.status == "ok"
        assert remote.counts.puts >= result.cache.misses and remote.counts.errors == 0
    assert len(lowerd_keys(redis)) == PARTITIONS

    served = second.build_all()  # an empty local cache: every partition comes from redis
    for name, result in served.items():
        assert sha(result) == sha(built[name])
        remote = result.cache.remote_report
        assert result.cache.misses == 0 and result.cache.hits == remote.counts.hits  # type: ignore[union-attr]
    assert sum(r.cache.hits for r in served.values()) == PARTITIONS
    stock = known_stock_digest("basic-tiny_linear", PROJECTS / "basic", *TINY_LINEAR)
    assert sha(served["tiny_linear"]) == stock
    # What redis served is now local: this machine's next build needs no redis at all.
    assert len(list((second.cache / "blobs").rglob("*"))) > PARTITIONS
    # And this machine counts what its builds asked of redis, for `lowerd cache stats`.
    assert remote_counts(second.cache).hits == PARTITIONS


def test_a_tampered_value_is_rejected_rebuilt_and_repaired(
    machines: tuple[Machine, Machine], redis: RedisServer
) -> None:
    first, second = machines
    expected = sha(first.build("two_methods"))
    client = redis.client()
    [one, other] = lowerd_keys(redis)
    # One value damaged in place, and the two swapped: each is a value under the wrong name.
    damaged = bytearray(client.get(one))
    damaged[-1] ^= 0xFF
    client.set(one, bytes(damaged))
    original_other = client.get(other)

    result = second.build("two_methods")
    assert sha(result) == expected  # rebuilt, identical
    remote = result.cache.remote_report
    assert remote is not None and remote.counts.errors == 1 and remote.counts.hits == 1
    assert result.cache.misses == 1
    assert any("failed verification" in p for p in remote.problems)
    # The fresh blob was written back over the damaged one.
    assert client.get(one) != bytes(damaged)

    client.set(one, original_other)  # another key's whole, valid entry: swapped
    shutil.rmtree(second.root / "build")  # a third machine: nothing built, nothing cached
    third = Machine(second.root, second.cache.with_name("cache-c"), second.monkeypatch)
    swapped = third.build("two_methods")
    assert sha(swapped) == expected
    assert (
        swapped.cache.remote_report is not None and swapped.cache.remote_report.counts.errors == 1
    )


def test_read_only_reads_but_never_writes(
    machines: tuple[Machine, Machine], redis: RedisServer
) -> None:
    first, second = machines
    set_remote(first.root, 'cache_remote = "read-only"')
    result = first.build("tiny_linear")
    assert (
        result.cache.remote_report is not None and result.cache.remote_report.status == "read-only"
    )
    assert result.cache.remote_report.counts.puts == 0
    assert redis.client().dbsize() == 0

    second.monkeypatch.setenv("LOWERD_CACHE_REMOTE", "read-write")  # CI writes
    written = second.build("tiny_linear")
    assert written.cache.remote_report is not None and written.cache.remote_report.counts.puts >= 1
    second.monkeypatch.delenv("LOWERD_CACHE_REMOTE")
    keys = redis.client().dbsize()

    shutil.rmtree(first.root / "build")
    laptop = Machine(first.root, first.cache.with_name("cache-laptop"), first.monkeypatch)
    read = laptop.build("tiny_linear")  # a read-only laptop is served by what CI wrote
    assert read.cache.hits == 1 and read.cache.remote_report is not None
    assert read.cache.remote_report.counts.hits == 1 and read.cache.remote_report.counts.puts == 0
    assert redis.client().dbsize() == keys


# Fail open, loudly ----------------------------------------------------------------------


def test_redis_killed_mid_build_the_build_goes_on_and_says_so(
    machines: tuple[Machine, Machine], redis: RedisServer
) -> None:
    first, _ = machines

    def progress(stage: str, target: str, detail: str | None) -> None:
        if stage == "preprocess":  # the partitions are about to be read from the cache
            redis.kill()

    result = first.build("two_methods", progress=progress)
    assert result.status == "ok", result.error
    remote = result.cache.remote_report
    assert remote is not None and remote.status.startswith("unavailable: ")
    assert remote.status.startswith("unavailable: ConnectionError: ")
    assert result.cache.misses == 2
    [line] = remote.warnings()[:1]
    assert line.startswith(f"remote cache {redis.url} unavailable (")
    assert line.endswith("; built with the local cache")


def test_redis_out_of_memory_is_survived_and_reported(
    machines: tuple[Machine, Machine], redis: RedisServer
) -> None:
    first, _ = machines
    client = redis.client()
    client.set("ballast", b"x" * (2 * 1024 * 1024))
    client.config_set("maxmemory", "1mb")
    client.config_set("maxmemory-policy", "noeviction")
    result = first.build("tiny_linear")
    assert result.status == "ok"
    remote = result.cache.remote_report
    assert remote is not None and remote.status.startswith("unavailable: OutOfMemoryError: ")
    assert lowerd_keys(redis) == []


def test_a_server_slower_than_the_timeout_is_given_up_within_it(
    machines: tuple[Machine, Machine],
) -> None:
    """A listener that accepts and never answers: each command waits cache_remote_timeout once,
    then the tier is off for the build."""
    first, _ = machines
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        pyproject = first.root / "pyproject.toml"
        text = pyproject.read_text()
        start = text.index("cache_url")
        end = text.index("\n", start)
        pyproject.write_text(
            text[:start]
            + f'cache_url = "redis://127.0.0.1:{port}/0"\ncache_remote_timeout = 0.5'
            + text[end:]
        )
        result = first.build("tiny_linear")
    assert result.status == "ok"
    remote = result.cache.remote_report
    assert remote is not None and remote.status.startswith("unavailable: ")
    assert remote.status.startswith("unavailable: TimeoutError: ")
    assert remote.counts.errors == 1  # one try, then off: not a retry per partition


def test_the_cli_says_when_redis_is_down_and_cache_stats_counts_remote(
    machines: tuple[Machine, Machine], redis: RedisServer, tmp_path: Path
) -> None:
    first, _ = machines
    cache = tmp_path / "cli-cache"
    # The first build, in-process (as the command's worker runs it; a CLI run would pay the
    # torch and ExecuTorch imports again), its table line as the command prints it.
    built = Machine(first.root, cache, first.monkeypatch).build("tiny_linear")
    assert built.status == "ok", built.error
    assert "remote 0 hit / 1 put" in format_report({"targets": [encode(built)]}, 1.0)
    redis.kill()
    # Neither the .pte nor the blob is left here: the build must ask redis, which is gone.
    (first.root / "build" / "tiny_linear.pte").unlink()
    shutil.rmtree(cache / "blobs")
    down = lowerd(first.root, cache, "build", "--json", "tiny_linear")
    assert down.returncode == 0, down.stderr
    document = json.loads(down.stdout)
    [target] = document["targets"]
    assert target["cache"]["remote"].startswith("unavailable: ")
    assert target["cache"]["remote_url"] == redis.url
    assert f"lowerd: remote cache {redis.url} unavailable (" in down.stderr
    assert any(w.startswith(f"remote cache {redis.url} unavailable") for w in document["warnings"])

    stats = lowerd(first.root, cache, "cache", "stats")
    assert stats.returncode == 0, stats.stderr
    assert f"remote:  {redis.url} (unavailable: ConnectionError: " in stats.stdout
    # The first build missed and put its blob; the second met the server gone.
    assert "remote totals: 0 hits, 1 misses, 1 puts, 1 errors" in stats.stdout


def test_a_password_in_the_url_is_used_and_never_shown(
    machines: tuple[Machine, Machine], tmp_path: Path
) -> None:
    first, second = machines
    with redis_server(tmp_path / "locked", "--requirepass", "s3cret-pw") as locked:
        url = f"redis://default:s3cret-pw@127.0.0.1:{locked.port}/0"
        wrong = f"redis://default:not-it@127.0.0.1:{locked.port}/0"
        shown = f"redis://default:***@127.0.0.1:{locked.port}/0"
        first.monkeypatch.setenv("LOWERD_CACHE_URL", url)
        result = first.build("tiny_linear")
        assert result.cache.remote_report is not None and result.cache.remote_report.status == "ok"
        assert (
            result.cache.remote_report.counts.puts >= 1 and result.cache.remote_report.url == shown
        )

        second.monkeypatch.setenv("LOWERD_CACHE_URL", wrong)
        refused = second.build("tiny_linear")
        assert refused.status == "ok"
        remote = refused.cache.remote_report
        assert remote is not None and remote.status.startswith("unavailable: AuthenticationError")
        document = json.dumps(encode(refused))
        assert "not-it" not in document and "s3cret-pw" not in document
        assert shown in remote.warnings()[0]


# Signed entries, the size cap on reads, the keys with the URL from the environment (issue 25) ---


def ed25519_keys(folder: Path, name: str, openssh: bool = False) -> tuple[Path, Path]:
    """A signing key, private to its user, and its verify key: PEM as `openssl genpkey -algorithm
    ed25519` writes them, or OpenSSH's as `ssh-keygen -t ed25519` does."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = s.PrivateFormat.OpenSSH if openssh else s.PrivateFormat.PKCS8
    public = (
        (s.Encoding.OpenSSH, s.PublicFormat.OpenSSH)
        if openssh
        else (s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo)
    )
    sign, verify = folder / f"{name}-sign.pem", folder / f"{name}-verify.pub"
    sign.write_bytes(key.private_bytes(s.Encoding.PEM, private, s.NoEncryption()))
    sign.chmod(0o600)
    verify.write_bytes(key.public_key().public_bytes(*public))
    return sign, verify


def forge(value: bytes, name: bytes) -> tuple[str, str, bytes]:
    """What anyone who can write the redis makes of a value: its payload with the first weight
    of its XNNPACK named data set to 1000.0, as a whole entry with its plain sha256 recomputed.
    Returns the key, the kind and that entry."""
    kind, key = name.decode().removeprefix(PREFIX).split(":")
    payload = decode_entry(value[value.index(MAGIC) :], key, kind)
    assert payload is not None
    document = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    [result] = document["results"]
    buffers = result["data_store"]["buffers"]
    weights = max(range(len(buffers)), key=lambda index: len(buffers[index]))
    buffers[weights] = struct.pack("<f", 1000.0) + buffers[weights][4:]
    forged = msgpack.packb(document, use_bin_type=True)
    return key, kind, entry_head(key, kind, forged) + forged


def replace_line(root: Path, starts: str, line: str) -> None:
    pyproject = root / "pyproject.toml"
    lines = pyproject.read_text().splitlines()
    kept = [line if text.startswith(starts) else text for text in lines]
    pyproject.write_text("\n".join(kept) + "\n")


def test_a_forged_entry_is_a_miss_for_a_reader_with_the_verify_key(
    machines: tuple[Machine, Machine], redis: RedisServer, tmp_path: Path
) -> None:
    from lowerd.cache.signing import load_signing_key, load_verify_key

    ci, laptop = machines
    sign, verify = ed25519_keys(tmp_path, "team")
    set_remote(ci.root, f'cache_remote_sign_key = "{sign}"')
    stock = known_stock_digest("basic-two_methods", PROJECTS / "basic", *TWO_METHODS)
    assert sha(ci.build("two_methods")) == stock

    client = redis.client()
    [one, other] = lowerd_keys(redis)
    # The team's own signature does not carry over to another name: a replay is refused too.
    replayed = client.get(other)
    one_kind, one_key = one.decode().removeprefix(PREFIX).split(":")
    assert load_verify_key(verify).open(one_key, one_kind, replayed) == "with a bad signature"
    key, kind, forged = forge(client.get(one), one)
    client.set(one, forged)  # the plain sha256 recomputed: unsigned
    attacker, _ = ed25519_keys(tmp_path, "attacker")
    key, kind, forged = forge(client.get(other), other)
    client.set(other, load_signing_key(attacker).sign(key, kind, forged))  # signed, not by the team

    set_remote(laptop.root, f'cache_remote = "read-only"\ncache_remote_verify_key = "{verify}"')
    result = laptop.build("two_methods")
    assert sha(result) == stock  # lowered here: stock's bytes
    remote = result.cache.remote_report
    assert remote is not None and remote.counts.hits == 0 and remote.counts.rejected == 2
    assert result.cache.misses == 2
    [line] = remote.problems  # one line, however many entries
    assert line.startswith(f"2 entries on {redis.url} not signed by ed25519 SHA256:")
    assert "1 unsigned, 1 with a bad signature" in line and line.endswith("; not used")
    document = encode(result)
    assert document["cache"]["remote_counts"]["rejected"] == 2
    assert document["cache"]["remote_trust"].startswith("ed25519 SHA256:")
    text = format_report({"targets": [document]}, 1.0)
    assert "remote 0 hit / 0 put, 2 rejected (read-only)" in text

    # Without the verify key, whoever can write the redis decides the bytes (the README says so).
    replace_line(laptop.root, "cache_remote_verify_key", "")
    shutil.rmtree(laptop.root / "build")
    trusting = Machine(laptop.root, laptop.cache.with_name("cache-trusting"), laptop.monkeypatch)
    served = trusting.build("two_methods")
    assert served.cache.hits == 2 and sha(served) != stock
    assert encode(served)["cache"]["remote_trust"] == "any writer"


def test_a_value_larger_than_the_cap_is_neither_fetched_nor_taken(
    machines: tuple[Machine, Machine], redis: RedisServer
) -> None:
    writer, reader = machines
    built = writer.build("tiny_linear")
    client = redis.client()
    [name] = lowerd_keys(redis)
    # A megabyte more than the writer put: a reader that fetched it whole would show it here.
    client.append(name, bytes(1024**2))
    set_remote(reader.root, 'cache_remote = "read-only"\ncache_remote_max_entry_size = "64"')

    before = client.info("stats")["total_net_output_bytes"]
    result = reader.build("tiny_linear")
    sent = client.info("stats")["total_net_output_bytes"] - before
    assert sha(result) == sha(built)
    remote = result.cache.remote_report
    assert remote is not None and remote.counts.hits == 0 and remote.counts.rejected >= 1
    [line] = [p for p in remote.problems if "cache_remote_max_entry_size" in p]
    assert line.endswith("larger than cache_remote_max_entry_size (64 B); not taken")
    assert sent < 64 * 1024  # the cap's worth of each value came, not the values


def test_the_cache_keys_apply_when_the_url_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lowerd.cache.tiered import TieredStore

    _, verify = ed25519_keys(tmp_path, "team", openssh=True)
    path = write_pyproject(
        tmp_path / "project",
        f"""\
        [tool.lowerd]
        cache_remote = "read-only"
        cache_ttl = 60
        cache_remote_max_entry_size = "1K"
        cache_remote_timeout = 1.5
        cache_remote_verify_key = "{verify}"
        [tool.lowerd.targets.a]
        entry = "a.py:f"
        """,
    )
    monkeypatch.setenv("LOWERD_CACHE_URL", "redis://127.0.0.1:1/0")
    store = store_for(load_config(path))
    assert isinstance(store, TieredStore)
    remote = store.remote
    assert not remote.writable and remote.ttl == 60 and remote.max_entry_bytes == 1024
    assert remote.timeout == 1.5 and remote.trust.startswith("ed25519 SHA256:")
    monkeypatch.delenv("LOWERD_CACHE_URL")
    assert not isinstance(store_for(load_config(path)), TieredStore)


def test_a_key_file_others_can_read_or_that_is_no_key_is_refused_at_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sign, verify = ed25519_keys(tmp_path, "team", openssh=True)
    sign.chmod(0o640)
    text = f"""\
        [tool.lowerd]
        cache_url = "redis://127.0.0.1:1/0"
        cache_remote_sign_key = "{sign}"
        [tool.lowerd.targets.a]
        entry = "a.py:f"
        """
    path = write_pyproject(tmp_path / "project", text)
    with pytest.raises(ConfigError, match="is open to its group or others") as info:
        load_config(path)
    assert info.value.location.line == 3 and "chmod 600" in info.value.message

    sign.chmod(0o600)
    assert load_config(path).remote_cache is not None
    write_pyproject(tmp_path / "project", text.replace(str(sign), "missing.pem"))
    with pytest.raises(ConfigError, match="cache_remote_sign_key") as info:
        load_config(path)
    assert info.value.location.line == 3
    # The signing key where the verify key belongs: laptops would hold what signs.
    write_pyproject(
        tmp_path / "project", text.replace("cache_remote_sign_key", "cache_remote_verify_key")
    )
    with pytest.raises(ConfigError, match="a private key") as info:
        load_config(path)
    assert info.value.location.line == 3

    sign.chmod(0o644)
    monkeypatch.setenv("LOWERD_CACHE_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("LOWERD_CACHE_SIGN_KEY", str(sign))
    write_pyproject(tmp_path / "project", "[tool.lowerd]\ntargets.a.entry = 'a.py:f'\n")
    with pytest.raises(ConfigError, match=r"\$LOWERD_CACHE_SIGN_KEY: .* is open to its group"):
        store_for(load_config(path))
    monkeypatch.setenv("LOWERD_CACHE_VERIFY_KEY", str(verify))
    monkeypatch.delenv("LOWERD_CACHE_SIGN_KEY")
    remote = store_for(load_config(path)).remote  # type: ignore[attr-defined]
    assert remote.trust.startswith("ed25519 SHA256:")
