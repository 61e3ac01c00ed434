"""lowerd compare: the `refused` target of basic/ lowered with each backend alone.

XNNPACK leaves its pow and cumsum on the CPU; Vulkan takes the pow and leaves the cumsum. Each
column must say what a normal build of the target with that backend says, the target's real .pte
and build record must stay as its real build left them, and the blob cache serves a compare as it
serves a build. CoreML is compared as if coremltools were not installed (a stand-in package that
fails to import): its column is the error, the others still compare.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lowerd.cli.compare_table import format_compare
from lowerd.daemon.compare_service import CompareService, compare_answer
from lowerd.daemon.rpc import RequestError, parse_request
from lowerd.daemon.rpc_messages import CompareCall
from lowerd.project.compare_result import BackendComparison, CompareResult, NotDelegatedGroup
from lowerd.project.config import load_config
from lowerd.project.result import ErrorInfo, TargetResult
from lowerd.project.wire import decode, encode
from lowerd.worker.protocol import WorkerJob
from lowerd.worker.workers import WorkerPool

from helpers import lowerd

TARGET = "refused"
XNNPACK_LEFT = [("aten.pow.Tensor_Scalar", 1), ("aten.cumsum.default", 1)]


def numbers(column: BackendComparison) -> tuple:
    """What the table shows of a backend, its time and cache outcome aside."""
    left = [(group.op, group.count) for group in column.not_delegated]
    facts = (column.coverage_percent, column.ops_delegated, column.ops, column.partitions)
    return (column.status, *facts, left, column.pte_bytes)


def stamp(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


async def build(pool: WorkerPool, job: WorkerJob) -> TargetResult:
    result = await pool.submit(job, lambda event: None).result()
    assert result.ok, result.error
    return result


@pytest.mark.asyncio
async def test_each_backend_is_a_normal_build_kept_apart_and_cached(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOWERD_CACHE_DIR", str(tmp_path / "cache"))  # the fork server's too
    config = str(project / "pyproject.toml")
    pool = WorkerPool(max_workers=2)
    try:
        real = await build(pool, WorkerJob(config, TARGET))  # XNNPACK, as the config says
        real_files = [project / "build" / "refused.pte", project / "build/.lowerd/refused.msgpack"]
        before = [stamp(path) for path in real_files]

        service = CompareService(pool)
        compared, outcome = await service.compare(config, TARGET, ["xnnpack", "vulkan"])
        assert outcome == "ok"
        xnnpack, vulkan = compared.backends
        assert [stamp(path) for path in real_files] == before
        assert numbers(xnnpack) == numbers(BackendComparison.of("xnnpack", real))
        assert numbers(xnnpack) == (
            "ok",
            50,
            2,
            4,
            2,
            XNNPACK_LEFT,
            real.sizes and real.sizes.pte_bytes,
        )
        # The real build's blobs serve the compare's XNNPACK partitions.
        assert (xnnpack.cache.hits, xnnpack.cache.misses) == (2, 0)
        assert numbers(vulkan)[:6] == ("ok", 83, 5, 6, 2, [("aten.cumsum.default", 1)])
        assert (vulkan.cache.hits, vulkan.cache.misses) == (0, 2)
        compare_dir = project / "build/.lowerd/compare"
        assert vulkan.output == str(compare_dir / "vulkan" / "refused.pte")
        assert sorted(p.name for p in compare_dir.iterdir()) == ["vulkan", "xnnpack"]

        # Unchanged: answered from the compare's own records, by the language server's command too.
        loaded = load_config(Path(config))
        answer = encode(await compare_answer(pool, loaded, [TARGET, "xnnpack,vulkan"]))
        again = [decode(BackendComparison, column) for column in answer["backends"]]
        assert [column.reused for column in again] == ["up-to-date", "up-to-date"]
        assert [numbers(column) for column in again] == [numbers(xnnpack), numbers(vulkan)]
        unknown = encode(await compare_answer(pool, loaded, ["nope"]))
        assert unknown["backends"] == [] and "unknown target 'nope'" in unknown["error"]

        # A normal build with Vulkan (the editor's `backends` override: build_target under
        # config.with_backends): the compare's numbers, and the compare's blobs serve it.
        with_vulkan = await build(pool, WorkerJob(config, TARGET, backends=("vulkan",)))
        assert numbers(BackendComparison.of("vulkan", with_vulkan)) == numbers(vulkan)
        assert (with_vulkan.cache.hits, with_vulkan.cache.misses) == (2, 0)
    finally:
        await pool.close()


def test_the_cli_prints_the_document_and_a_missing_backend_is_its_column(
    project: Path, tmp_path: Path, runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process (no daemon runs: `runtime` is private), with coremltools unimportable."""
    stand_in = tmp_path / "no-coremltools" / "coremltools"
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'coremltools'\", name='coremltools')\n"
    )
    paths = [str(stand_in.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))

    args = ("compare", TARGET, "--backends", "xnnpack,coreml", "--json")
    run = lowerd(project, tmp_path / "cache", *args)
    assert run.returncode == 0, run.log  # one backend compared: the other's error is its column
    xnnpack, coreml = (decode(BackendComparison, c) for c in run.json()["backends"])
    assert numbers(xnnpack)[:6] == ("ok", 50, 2, 4, 2, XNNPACK_LEFT)
    assert (xnnpack.cache.hits, xnnpack.cache.misses) == (0, 2)
    assert coreml.status == "error" and coreml.error is not None
    assert coreml.error.kind == "backend-unavailable"
    assert "CoreML's partitioner cannot be loaded" in coreml.error.message
    assert "coremltools" in coreml.error.message
    table = (
        (project / "pyproject.toml")
        .read_text()
        .splitlines()
        .index(f"[tool.lowerd.targets.{TARGET}]")
    )
    assert (coreml.error.file, coreml.error.line) == ("pyproject.toml", table + 1)
    assert "Traceback" not in run.stderr, run.log
    assert not (project / "build" / "refused.pte").exists()  # only the compare's folder written


def test_the_socket_takes_a_compare_request_checked_whole() -> None:
    frame = {
        "op": "compare",
        "config": "/p/pyproject.toml",
        "target": TARGET,
        "backends": ["vulkan"],
    }
    assert parse_request(frame) == CompareCall("/p/pyproject.toml", TARGET, ("vulkan",))
    assert parse_request(encode(CompareCall("/p", TARGET))) == CompareCall("/p", TARGET)
    with pytest.raises(RequestError, match="backends"):
        parse_request({**frame, "backends": "vulkan"})
    with pytest.raises(RequestError, match="jobs: unknown field"):
        parse_request({**frame, "jobs": 2})


def test_the_table_has_a_column_per_backend_and_each_error_below() -> None:
    ok = BackendComparison(
        "xnnpack", "XNNPACK", "ok", 50, 2, 4, 2, (NotDelegatedGroup("aten.pow.Tensor_Scalar", 1),)
    )
    failed = BackendComparison.failed(
        "coreml", ErrorInfo("backend-unavailable", "no coremltools", "pyproject.toml", 9)
    )
    text = format_compare(CompareResult("/p/pyproject.toml", TARGET, (ok, failed)), 1.0)
    lines = text.splitlines()
    assert lines[1].split() == ["XNNPACK", "CoreML"]
    assert lines[2].split() == ["coverage", "50", "%", "error"]
    assert "1× aten.pow.Tensor_Scalar" in text
    assert "CoreML: backend-unavailable (pyproject.toml:9): no coremltools" in text
    assert lines[-1] == "1 of 2 backends compared in 1.0 s"
