"""torchao's weight quantization (IntxUnpackedToInt8Tensor.from_hp) served from the store: exact
bytes after edits, corrupt entries recomputed, and no memo where exactness cannot be shown."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchao.quantization import IntxUnpackedToInt8Tensor
from torchao.quantization.quantize_.workflows.intx.intx_choose_qparams_algorithm import (
    IntxChooseQParamsAlgorithm,
)

from lowerd.cache.store import BlobStore
from lowerd.lowering.intx_memo import MEMO_KIND, IntxMemo
from lowerd.project.config import ProjectConfig
from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.result import TargetResult

from helpers import ColdBuild, cold_rebuild
from known_stock import files_digest, known_or_live
from stock import call_entry, sha256
from testkit.projects import write_text_atomic
from testkit.stock_lowering import lower_stock
from testkit.stock_recipe import optimum_quantize_model

TARGET = "optimum"  # 8da4w, hqq_scale_only, fc1 and fc2 quantized (fc3 left float)


def build(config: ProjectConfig, store: BlobStore) -> TargetResult:
    return cold_rebuild(config, TARGET, store)


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> ColdBuild:
    return ColdBuild.made(tmp_path_factory.mktemp("cold"), "torchaoquant", TARGET)


def test_an_edit_requantizes_only_the_weights_it_changed(cold: ColdBuild, tmp_path: Path) -> None:
    config, store = cold.copied(tmp_path)
    first = cold.result
    assert first.memo[MEMO_KIND] == {"hits": 0, "misses": 2}  # fc1, fc2

    assert build(config, store).memo[MEMO_KIND] == {"hits": 2, "misses": 0}

    model = config.root / "models" / "linears.py"
    write_text_atomic(model, model.read_text().replace("FC2_SCALE = 1.0", "FC2_SCALE = 0.5"))
    edited = build(config, store)
    assert edited.memo[MEMO_KIND] == {"hits": 1, "misses": 1}  # fc1 served, fc2 quantized
    assert edited.sha256 != first.sha256
    # Built afresh without the memo, the edited model makes the same bytes.
    assert build(config, BlobStore(tmp_path / "empty")).sha256 == edited.sha256


def test_a_corrupt_memo_entry_is_recomputed_and_the_pte_is_unchanged(
    cold: ColdBuild, tmp_path: Path
) -> None:
    config, store = cold.copied(tmp_path)
    entries = sorted((tmp_path / "cache").rglob(f"*.{MEMO_KIND}"))
    assert len(entries) == 2
    for entry in entries:  # a flipped bit in each stored weight
        data = bytearray(entry.read_bytes())
        data[-1] ^= 0x01
        entry.write_bytes(bytes(data))
    again = build(config, store)
    assert again.memo[MEMO_KIND] == {"hits": 0, "misses": 2}
    assert again.sha256 == cold.result.sha256


class _PackedOtherwise(IntxUnpackedToInt8Tensor):
    """A subclass may compute otherwise: never memoized."""


def _quantized(cls: type, weight: torch.Tensor, **kwargs: object) -> object:
    return cls.from_hp(
        weight,
        (1, 32),
        torch.int4,
        intx_choose_qparams_algorithm=IntxChooseQParamsAlgorithm.HQQ_SCALE_ONLY,
        **kwargs,
    )


def test_a_hit_is_the_tensor_from_hp_makes_and_only_plain_calls_are_memoized(
    tmp_path: Path,
) -> None:
    weight = torch.nn.Parameter(torch.randn(16, 64, generator=torch.Generator().manual_seed(0)))
    expected = _quantized(IntxUnpackedToInt8Tensor, weight)
    memo = IntxMemo(BlobStore(tmp_path / "cache"))
    with memo.installed():
        made = [_quantized(IntxUnpackedToInt8Tensor, weight) for _ in range(2)]
        _quantized(_PackedOtherwise, weight)
        scale, zero = expected.scale, expected.zero_point
        _quantized(
            IntxUnpackedToInt8Tensor,
            weight,
            custom_scale=None,
            custom_zero_point=None,
        )  # the same call spelled out: a hit
        IntxUnpackedToInt8Tensor.from_hp(
            weight,
            (1, 32),
            torch.int4,
            intx_choose_qparams_algorithm=None,
            custom_scale=scale,
            custom_zero_point=zero,
        )  # the caller's own qparams: kept as given, never memoized
    assert (memo.hits, memo.misses) == (2, 1)
    for tensor in made:
        assert type(tensor) is IntxUnpackedToInt8Tensor
        for name in ("qdata", "scale", "zero_point"):
            value, reference = getattr(tensor, name), getattr(expected, name)
            assert (value.dtype, value.shape, value.stride()) == (
                reference.dtype,
                reference.shape,
                reference.stride(),
            )
            assert value.numpy().tobytes() == reference.numpy().tobytes()
        for name in ("target_dtype", "block_size", "dtype", "activation_quantization"):
            assert getattr(tensor, name) == getattr(expected, name)
    assert "from_hp" not in vars(_PackedOtherwise)
    assert IntxUnpackedToInt8Tensor.from_hp.__func__.__name__ == "from_hp"


def test_regional_edge_generation_and_the_memo_give_stock_s_bytes(tmp_path: Path) -> None:
    """Three 8da4w layers of one structure and a head: cold (every weight quantized) and
    rebuilt from the cache (every weight served) both go by region, and both write the stock
    script's bytes."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    cold = ColdBuild.made(tmp_path / "cold", "torchaoquant", "layers")
    config, store = cold.copied(tmp_path / "again")
    again = cold_rebuild(config, "layers", store)
    assert (cold.result.memo[MEMO_KIND], again.memo[MEMO_KIND]) == (
        {"hits": 0, "misses": 7},
        {"hits": 7, "misses": 0},
    )
    # the rebuild reads both templates (the layers' and the head's) from the cold build's cache
    for result, reused in ((cold.result, 0), (again, 2)):
        regional = EdgeGeneration.regional(regions=4, templates=2, reused=reused)
        assert [method.edge_generation for method in result.methods.values()] == [regional]

    def live() -> str:
        made = call_entry(config.root, "models/linears.py:make_layers")
        optimum_quantize_model(made[0], "8da4w")
        return sha256(lower_stock(made, [XnnpackPartitioner()])[1])

    # tests/stock_digests.json's for these versions and files (tests/known_stock.py), else live
    stock = known_or_live("intx-layers", files_digest(Path(__file__), config.root), live)
    assert cold.result.sha256 == again.sha256 == stock
