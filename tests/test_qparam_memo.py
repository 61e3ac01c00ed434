"""Observers' qparam searches served from the store: exact bytes after edits, corrupt entries
recomputed, and no memo where exactness cannot be shown."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchao.quantization.pt2e.observer import HistogramObserver

from lowerd.cache.store import BlobStore
from lowerd.lowering.qparam_memo import MEMO_KIND, QParamMemo
from lowerd.project.config import ProjectConfig
from lowerd.project.result import TargetResult

from helpers import ColdBuild, cold_rebuild
from stock import known_stock_digest
from testkit.projects import write_text_atomic

ENTRY = "models/qnet.py:make"


def build(config: ProjectConfig, store: BlobStore) -> TargetResult:
    return cold_rebuild(config, "qnet", store)


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> ColdBuild:
    """qnet built once on a cold cache."""
    return ColdBuild.made(tmp_path_factory.mktemp("cold"), "quantized", "qnet")


def test_a_head_edit_serves_the_backbone_searches_and_equals_stock(
    cold: ColdBuild, tmp_path: Path
) -> None:
    config, store = cold.copied(tmp_path)
    project, first = config.root, cold.result
    searches = sum(first.memo["qparams"].values())
    assert first.memo["qparams"]["misses"] > 0

    model = project / "models" / "qnet.py"
    edited = model.read_text().replace("HEAD_ACTIVATION = None", "HEAD_ACTIVATION = torch.relu")
    write_text_atomic(model, edited)
    after_edit = build(config, store)

    counts = after_edit.memo["qparams"]
    assert counts["hits"] >= searches - 2, counts  # only the head's observers saw new values
    assert after_edit.sha256 != first.sha256
    assert after_edit.sha256 == known_stock_digest("qnet-head-relu", project, ENTRY, ["xnnpack"])


def test_a_corrupt_memo_entry_is_recomputed_and_the_pte_still_equals_stock(
    cold: ColdBuild, tmp_path: Path
) -> None:
    config, store = cold.copied(tmp_path)
    project, first = config.root, cold.result
    entries = sorted((tmp_path / "cache").rglob(f"*.{MEMO_KIND}"))
    assert entries
    for entry in entries:  # a flipped bit in each stored result
        data = bytearray(entry.read_bytes())
        data[-1] ^= 0x01
        entry.write_bytes(bytes(data))

    again = build(config, store)

    assert again.memo["qparams"]["misses"] >= len(entries)
    assert again.sha256 == first.sha256 == known_stock_digest("qnet", project, ENTRY, ["xnnpack"])


class _TunedObserver(HistogramObserver):
    """A user's subclass: it may change what the search computes, so it is never memoized."""


def _calibrated(cls: type) -> HistogramObserver:
    torch.manual_seed(0)
    observer = cls(dtype=torch.int8, qscheme=torch.per_tensor_symmetric)
    observer(torch.randn(64, 16))
    return observer


def test_only_the_library_observer_is_memoized_and_a_hit_is_bitwise_the_search(
    tmp_path: Path,
) -> None:
    expected = HistogramObserver._non_linear_param_search(_calibrated(HistogramObserver))
    memo = QParamMemo(BlobStore(tmp_path / "cache"))
    with memo.installed():
        first = _calibrated(HistogramObserver)._non_linear_param_search()
        second = _calibrated(HistogramObserver)._non_linear_param_search()
        _calibrated(_TunedObserver)._non_linear_param_search()
    assert (memo.hits, memo.misses) == (1, 1)  # the subclass searched without the memo
    for found in (first, second):
        for value, reference in zip(found, expected, strict=True):
            assert value.dtype == reference.dtype and value.shape == reference.shape
            assert value.numpy().tobytes() == reference.numpy().tobytes()
    assert "_non_linear_param_search" not in vars(_TunedObserver)
    assert HistogramObserver._non_linear_param_search.__name__ == "_non_linear_param_search"
