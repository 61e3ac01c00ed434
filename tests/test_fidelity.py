"""Every .pte lowerd writes equals stock ExecuTorch's bytes: cold cache, warm cache, after edits."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.project.config import ProjectConfig, load_config
from lowerd.project.result import TargetResult

from stock import forget_project_modules, known_stock_digest, sha256


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "cache")


def cold_store(basic_cold: dict[str, Any], name: str, tmp_path: Path) -> BlobStore:
    """A copy of the cache the session's cold build of `name` left (conftest.py basic_cold): the
    store a cold build of it in this test would leave, without lowering it again."""
    return BlobStore(shutil.copytree(basic_cold[name].cache, tmp_path / "cold-cache"))


def build(config: ProjectConfig, name: str, store: BlobStore | None) -> TargetResult:
    forget_project_modules(config.root)  # an edited file must be imported afresh
    # reuse=False: these tests are about the blob cache, not about keeping an unchanged .pte.
    result = build_target(config, config.targets[name], store, reuse=False)
    assert result.status == "ok", result.error
    return result


def pte_digest(result: TargetResult) -> str:
    return sha256(Path(result.output).read_bytes())


def partitions(result: TargetResult) -> int:
    return sum(len(report.partitions) for report in result.methods.values())


@pytest.mark.parametrize("name", ["tiny_linear", "refused", "two_methods", "dynamic", "pkg"])
def test_cold_and_warm_builds_equal_stock(
    project: Path, tmp_path: Path, basic_cold: dict[str, Any], name: str
) -> None:
    config = load_config(project / "pyproject.toml")
    target = config.targets[name]
    expected = known_stock_digest(
        f"basic-{name}", project, target.entry.value, list(target.backends)
    )

    # The cold build, on an empty cache: the session's (conftest.py basic_cold, which
    # tests/test_edge_speedups.py reads too), in its own copy of basic/.
    cold = basic_cold[name].result
    assert pte_digest(cold) == cold.sha256 == expected
    assert (cold.cache.hits, cold.cache.misses) == (0, partitions(cold))

    store = cold_store(basic_cold, name, tmp_path)
    warm = build(config, name, store)
    assert pte_digest(warm) == expected
    assert (warm.cache.hits, warm.cache.misses) == (partitions(warm), 0)
    assert all(p.cache == "hit" for r in warm.methods.values() for p in r.partitions)


def test_weight_edit_reuses_untouched_partitions(
    project: Path, tmp_path: Path, basic_cold: dict[str, Any]
) -> None:
    config = load_config(project / "pyproject.toml")
    store = cold_store(basic_cold, "refused", tmp_path)
    model = project / "models" / "refused.py"
    source = model.read_text()
    # refused = Linear -> pow -> cumsum -> Linear: re-initialise only the last Linear's weights.
    assert "self.fc2 = nn.Linear" in source, "fixture changed: update this edit"
    edited = source.replace(
        "self.fc2 = nn.Linear(8, 8)",
        "self.fc2 = nn.Linear(8, 8)\n        nn.init.constant_(self.fc2.weight, 0.5)",
    )
    model.write_text(edited)

    result = build(config, "refused", store)
    expected = known_stock_digest(
        "basic-refused-fc2-constant", project, "models/refused.py:make", ["xnnpack"]
    )
    assert pte_digest(result) == expected
    assert (result.cache.hits, result.cache.misses) == (1, 1)


def test_structural_edit_equals_stock(
    project: Path, tmp_path: Path, basic_cold: dict[str, Any]
) -> None:
    config = load_config(project / "pyproject.toml")
    store = cold_store(basic_cold, "tiny_linear", tmp_path)
    model = project / "models" / "tiny_linear.py"
    model.write_text(
        model.read_text().replace("nn.ReLU()", "nn.ReLU(), nn.Linear(8, 4), nn.Hardtanh()")
    )

    result = build(config, "tiny_linear", store)
    expected = known_stock_digest(
        "basic-tiny_linear-structural", project, "models/tiny_linear.py:make", ["xnnpack"]
    )
    assert pte_digest(result) == expected
    assert result.cache.misses == 1


def test_corrupt_cache_entry_is_a_miss_and_the_build_still_matches(
    project: Path, tmp_path: Path, basic_cold: dict[str, Any]
) -> None:
    config = load_config(project / "pyproject.toml")
    first = basic_cold["tiny_linear"].result
    store = cold_store(basic_cold, "tiny_linear", tmp_path)
    # The one blob (memo entries, such as XNNPACK's pattern targets, carry a kind suffix).
    [entry] = [p for p in (store.root / "blobs").rglob("*") if p.is_file() and "." not in p.name]
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF
    entry.write_bytes(bytes(data))

    again = build(config, "tiny_linear", store)
    assert pte_digest(again) == first.sha256
    assert (again.cache.hits, again.cache.misses) == (0, 1)
    assert store.corrupt_removed == 1
    assert build(config, "tiny_linear", store).cache.hits == 1  # rewritten, readable again


def test_no_cache_builds_the_same_bytes(project: Path) -> None:
    config = load_config(project / "pyproject.toml")
    result = build(config, "two_methods", None)
    assert pte_digest(result) == known_stock_digest(
        "basic-two_methods", project, "models/two_methods.py:make", ["xnnpack"]
    )
    assert all(
        p.cache is None or p.cache == "uncached"
        for r in result.methods.values()
        for p in r.partitions
    )


def _with_backends(project: Path, name: str, backends: list[str]) -> ProjectConfig:
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text().replace(
        f"[tool.lowerd.targets.{name}]\n",
        f"[tool.lowerd.targets.{name}]\nbackends = {backends!r}\n".replace("'", '"'),
    )
    pyproject.write_text(text)
    return load_config(pyproject)


def test_vulkan_cold_and_warm_equal_stock(
    project: Path, store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _with_backends(project, "refused", ["vulkan"])
    expected = known_stock_digest(
        "basic-refused-vulkan", project, "models/refused.py:make", ["vulkan"]
    )
    made = _count_pattern_graphs(monkeypatch)
    cold = build(config, "refused", store)
    # Vulkan's pattern graphs (RoPE references, ~2 s each) were made once, not once a partition
    # and once to partition (lowering/vulkan_patterns.py), and the bytes are stock's.
    assert partitions(cold) == 2 and made and set(made.values()) == {1}
    warm = build(config, "refused", store)
    assert pte_digest(cold) == pte_digest(warm) == expected
    assert warm.cache.misses == 0 and warm.cache.hits == partitions(warm) > 0
    assert set(warm.methods["forward"].backends) == {"Vulkan"}


def _count_pattern_graphs(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times each registered Vulkan pattern function makes its graphs, from now on."""
    from executorch.backends.vulkan.patterns.pattern_registry import fusable_patterns

    made: dict[str, int] = {}
    for name, entry in fusable_patterns.items():
        if entry.get_graphs_fn is not None:

            def counted(make: Any = entry.get_graphs_fn, name: str = name) -> Any:
                made[name] = made.get(name, 0) + 1
                return make()

            made[name] = 0
            monkeypatch.setattr(entry, "get_graphs_fn", counted)
    return made


def test_coreml_warm_build_equals_cold(project: Path, store: BlobStore) -> None:
    # CoreML writes a fresh uuid into every blob, so stock CoreML output is never reproducible;
    # what lowerd can promise is that a cache hit returns the cold build's bytes.
    config = _with_backends(project, "tiny_linear", ["coreml"])
    cold = build(config, "tiny_linear", store)
    warm = build(config, "tiny_linear", store)
    assert pte_digest(cold) == pte_digest(warm)
    assert (warm.cache.hits, warm.cache.misses) == (1, 0)
    assert set(warm.methods["forward"].backends) == {"CoreML"}


def test_two_backends_in_priority_order(project: Path, store: BlobStore) -> None:
    config = _with_backends(project, "refused", ["xnnpack", "vulkan"])
    expected = known_stock_digest(
        "basic-refused-xnnpack-vulkan", project, "models/refused.py:make", ["xnnpack", "vulkan"]
    )
    result = build(config, "refused", store)
    assert pte_digest(result) == expected
    report = result.methods["forward"]
    assert "XNNPACK" in report.backends
    cumsum = next(op for op in report.not_delegated if op.op == "aten.cumsum.default")
    assert cumsum.reason.startswith("no XNNPACK support for aten.cumsum.default; Vulkan: ")
