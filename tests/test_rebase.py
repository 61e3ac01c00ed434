"""A one-op edit re-lowers one block: the others' blobs are rebased onto the shifted debug handles,
and the .pte still equals stock ExecuTorch's bytes."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lowerd.cache.store import BlobStore
from lowerd.lowering.build import build_target
from lowerd.lowering.preprocess_codec import decode_results
from lowerd.lowering.rebase import CannotRebase, rebase, rebase_xnnpack_blob
from lowerd.project.config import load_config
from lowerd.project.result import TargetResult

from stock import PROJECTS, forget_project_modules, importable_copy, known_stock_digest

BLOCKS = 4
# fc1+gelu of block 0 | fc2+add of block i with fc1+gelu of block i+1 | fc2+add of the last block
PARTITIONS = BLOCKS + 1


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Path]:
    with importable_copy(PROJECTS / "blocks", tmp_path / "blocks") as root:
        yield root


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The unedited stack built once, cold: its blob cache (each test copies it) and .pte digest."""
    folder = tmp_path_factory.mktemp("cold")
    with importable_copy(PROJECTS / "blocks", folder / "blocks") as root:
        first = build(root, BlobStore(folder / "cache"))
    assert first.cache.misses == PARTITIONS
    return folder / "cache", first.sha256


def cold_store(cold: tuple[Path, str], destination: Path) -> BlobStore:
    """A private copy of the cold build's blob cache."""
    return BlobStore(shutil.copytree(cold[0], destination))


def build(root: Path, store: BlobStore) -> TargetResult:
    forget_project_modules(root)
    config = load_config(root / "pyproject.toml")
    result = build_target(config, config.targets["stack"], store, reuse=False)
    assert result.status == "ok", result.error
    return result


def put_extra_op_in(root: Path, block: int) -> None:
    model = root / "models" / "stack.py"
    text = model.read_text()
    model.write_text(text.replace("EXTRA_OP_IN_BLOCK = -1", f"EXTRA_OP_IN_BLOCK = {block}"))


@pytest.mark.parametrize("block", [0, 2, BLOCKS - 1])
def test_an_op_inserted_in_one_block_rebuilds_only_that_block(
    stack: Path, tmp_path: Path, block: int, cold: tuple[Path, str]
) -> None:
    store = cold_store(cold, tmp_path / "cache")  # the unedited stack's PARTITIONS misses

    put_extra_op_in(stack, block)
    edited = build(stack, store)

    stock = known_stock_digest(
        f"blocks-extra-op-{block}", stack, "models/stack.py:make", ["xnnpack"]
    )
    assert edited.sha256 == stock
    assert edited.sha256 != cold[1]
    # The partition holding the new op is new; every partition after it moved its handles and
    # was rebased; those before it are exact hits.
    assert edited.cache.misses == 1
    assert edited.cache.hits == PARTITIONS - 1
    assert edited.cache.rebased == PARTITIONS - 1 - block


def test_a_rebased_blob_equals_a_fresh_preprocess(
    stack: Path, tmp_path: Path, cold: tuple[Path, str]
) -> None:
    # Build the edited model cold, then rebase the unedited model's cached blobs onto it.
    put_extra_op_in(stack, 0)
    fresh_store = BlobStore(tmp_path / "fresh")
    build(stack, fresh_store)
    fresh = _entries(fresh_store)

    old_store = cold_store(cold, tmp_path / "old")  # the unedited model's, built cold

    rebased_any = False
    for digest, (old_results, old_handles) in _entries(old_store).items():
        if digest not in fresh:
            continue  # the partition the edit changed
        new_results, new_handles = fresh[digest]
        rebased = rebase("XnnpackBackend", old_results, old_handles, new_handles)
        assert [r.processed_bytes for r in rebased] == [r.processed_bytes for r in new_results]
        rebased_any |= old_handles != new_handles
    assert rebased_any


def test_a_blob_that_is_not_xnnpack_is_not_rebased() -> None:
    with pytest.raises(CannotRebase):
        rebase_xnnpack_blob(b"\0" * 64, {1: 2})
    with pytest.raises(CannotRebase):
        rebase("CoreMLBackend", [], (1,), (2,))


def _entries(store: BlobStore) -> dict:
    entries = {}
    for path in (store.root / "blobs").rglob("*"):
        if path.is_file() and "." not in path.name:  # blobs, not memo entries (`<key>.<kind>`)
            entries[path.name] = decode_results(store.get(path.name))
    return entries


# Vulkan's preprocess costs seconds per partition (it exports its fusion patterns' graphs each
# time): two blocks, three partitions, are enough for one before the edit and one after it.
VULKAN_BLOCKS = 2


def test_vulkan_partitions_are_reused_only_before_the_edit(stack: Path, tmp_path: Path) -> None:
    # Vulkan is keyed with its handles as they are (see lowering/rebase.py): the partitions
    # before the edit are hits, the edited one and those after it are preprocessed again.
    pyproject = stack / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('["xnnpack"]', '["vulkan"]'))
    model = stack / "models" / "stack.py"
    model.write_text(model.read_text().replace("BLOCKS = 4", f"BLOCKS = {VULKAN_BLOCKS}"))
    store = BlobStore(tmp_path / "cache")
    cold = build(stack, store)
    assert cold.cache.misses == VULKAN_BLOCKS + 1
    put_extra_op_in(stack, VULKAN_BLOCKS - 1)

    edited = build(stack, store)
    stock = known_stock_digest("blocks-vulkan-extra-op", stack, "models/stack.py:make", ["vulkan"])
    assert edited.sha256 == stock
    hits = VULKAN_BLOCKS - 1
    assert (edited.cache.hits, edited.cache.rebased, edited.cache.misses) == (hits, 0, 2)
