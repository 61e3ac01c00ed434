"""Regional edge generation (lowering/region_edge.py) gives the stock script's bytes, and
ExecuTorch's own edge generation runs wherever a gate does not hold: small layer stacks and the
gates' cases. tests/test_region_layers.py builds a project by region, tests/test_region_flows.py
lowers what LLM exports carry (KV caches, dynamic shapes, 8da4w, custom SDPA).

Stock here is a plain ExecuTorch run with nothing of lowerd's installed (tests/regional.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from executorch.exir.pass_base import ExportPass, PassResult
from torch import nn

from lowerd.cache.store import BlobStore
from lowerd.lowering import edge_speedups
from lowerd.lowering.edge_speedups import EdgeSpeedups
from lowerd.lowering.region_edge import (
    RegionalEdge,
    RegionalRun,
    program_regions,
    why_stock_call,
)
from lowerd.lowering.region_passes import why_passes
from lowerd.lowering.template_store import TemplateStore

from helpers import PROJECTS
from known_stock import files_digest, known_or_live, program_digest
from regional import (
    CONSTANT_METHODS,
    Plain,
    Stack,
    exported,
    lowered,
    lowered_through,
    optimum_passes,
    regional_against_stock,
    regional_and_stock,
    replay_metadata,
    rewrite_templates,
)
from stock import sha256

REGIONAL = Path(__file__).with_name("regional.py")
OPTIMUM = PROJECTS / "optimum"


def _plain_stack() -> Any:
    """Stack(Plain) exported, its weights the same in each run (stock's digest in the table)."""
    torch.manual_seed(0)
    return exported(Stack(Plain))


def _known_stock(name: str, program: Any) -> str:
    """Stock's sha256 of the program lowered with nothing else given (regional_against_stock's):
    tests/stock_digests.json's where it holds this program, else lowered live."""
    return known_or_live(name, program_digest(program), lambda: sha256(lowered(program)))


def test_a_corrupt_stored_template_is_a_miss_and_stock_s_bytes(tmp_path: Any) -> None:
    """A template entry whose payload does not decode (truncated, its digest the store's own)
    is generated again: a miss, counted, and the .pte is stock's."""
    program = _plain_stack()
    stock = _known_stock("plain-stack", program)
    store = BlobStore(tmp_path / "cache")
    first = TemplateStore(store)
    made = lowered_through(program, first)
    assert rewrite_templates(store, tmp_path / "cache", lambda p: p[: len(p) // 2]) == first.stored
    again = TemplateStore(store)
    read = lowered_through(program, again)
    assert sha256(made[0]) == sha256(read[0]) == stock
    assert made[1] == read[1] == [RegionalRun(regions=3, templates=1, stock_because=None)]
    assert first.stored >= 1 and again.unreadable == first.stored


def test_repeated_layers_without_an_llama_are_generated_by_region() -> None:
    stock, mine, runs = regional_against_stock("plain-stack", _plain_stack())
    assert mine == stock
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]


class Tied(nn.Module):
    """Layers reading one weight: the replays give its placeholder its last user's metadata."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = Stack(Plain)
        for layer in self.layers.layers[1:]:
            layer.linear.weight = self.layers.layers[0].linear.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def test_a_weight_several_layers_read_has_stock_s_metadata() -> None:
    """Strict export: each node's source_fn_stack is its own layer's, and the tied weight's
    placeholder its last reader's (the assembly once gave it the first reader's)."""
    with torch.no_grad():
        program = exported(Tied(), strict=True)
    edges: list[Any] = []
    stock, mine, runs = regional_and_stock(program, edges=edges)
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]
    assert replay_metadata(edges[1]) == replay_metadata(edges[0])


def test_constant_methods_with_an_etrecord_run_stock() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig

    programs = {"forward": exported(Stack(Plain))}
    xnnpack = {"forward": [XnnpackPartitioner()]}
    why = why_stock_call(xnnpack, programs, EdgeCompileConfig(), CONSTANT_METHODS, True)
    assert why == "an etrecord is asked for"


class Converted(nn.Module):
    """A layer with a dtype conversion (`_to_copy`, which MemoryFormatOpsPass turns into its
    dim_order op unless `_skip_dim_order`) XNNPACK leaves outside its delegates."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)).to(torch.float64).to(torch.float32)


class Embedded(nn.Module):
    """An embedding with a padding_idx (RemovePaddingIdxEmbeddingPass drops it) before layers
    that convert dtypes."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8, padding_idx=0)
        self.layers = Stack(Converted)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.layers(self.embed(tokens))


def test_optimum_s_program_level_settings_are_generated_by_region() -> None:
    """Its constant methods, EdgeCompileConfig and transform pass, together: the .pte is the
    stock script's, by region, and each setting did what it does."""
    from executorch.exir import EdgeCompileConfig

    def optimum() -> dict[str, Any]:
        return {
            "constant_methods": CONSTANT_METHODS,
            "compile_config": EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
            "transform_passes": optimum_passes(),
        }

    torch.manual_seed(0)
    program = torch.export.export(Embedded().eval(), (torch.tensor([[0, 3, 5, 0]]),))
    # Stock's lowering reads the program and the settings this file, regional.py and the
    # optimum project write.
    made_of = program_digest(program) + files_digest(Path(__file__), REGIONAL, OPTIMUM)
    stock = known_or_live("optimum-settings", made_of, lambda: sha256(lowered(program, optimum())))
    edges: list[Any] = []
    settings = optimum()
    regional = RegionalEdge(settings["transform_passes"])
    with EdgeSpeedups(None).installed(), regional.installed():
        mine = lowered(program, settings, edges)
    runs = regional.runs
    assert sha256(mine) == stock
    assert runs == [RegionalRun(regions=4, templates=2, stock_because=None)]
    assert all(name.encode() in mine for name in CONSTANT_METHODS)  # as methods of the .pte
    assert b"_to_copy" in mine and b"_to_dim_order_copy" not in mine  # MemoryFormatOps left out
    graph = edges[-1].exported_program().graph
    embedding = [node for node in graph.nodes if "embedding" in str(node.target)]
    assert [len(node.args) for node in embedding] == [2]  # the pass ran: padding_idx dropped


class ReadsSeqNr(ExportPass):
    """A pass that reads a field the assembly leaves the template's."""

    def call(self, graph_module: Any) -> PassResult:
        for node in graph_module.graph.nodes:
            node.meta.get("seq_nr")
        return PassResult(graph_module, False)


def test_transform_passes_off_the_allow_list_run_stock() -> None:
    [optimum] = optimum_passes()
    assert why_passes(None) is None and why_passes([optimum]) is None
    assert why_passes({"forward": [optimum]}) is None
    off = "a transform pass the argument does not cover (ReadsSeqNr)"
    assert why_passes([optimum, ReadsSeqNr()]) == off
    assert why_passes({"forward": [ReadsSeqNr()]}) == off
    optimum.call = ReadsSeqNr().call  # an instance attribute PassBase would call
    assert why_passes([optimum]) == (
        "a transform pass the argument does not cover (RemovePaddingIdxEmbeddingPass)"
    )


def test_each_method_is_generated_on_its_own() -> None:
    """Prefill and decode by region, each from its own template; the token embedding (no layers)
    by ExecuTorch's function on it alone."""
    torch.manual_seed(0)
    embedding = torch.export.export(nn.Embedding(16, 8).eval(), (torch.tensor([[1, 2]]),))
    programs = {
        "prefill": exported(Stack(Plain)),
        "decode": torch.export.export(Stack(Plain).eval(), (torch.randn(1, 8),)),
        "token_embedding": embedding,
    }
    stock, mine, runs = regional_against_stock("each-method", programs)
    assert mine == stock
    assert runs == [
        RegionalRun(3, 1, None, ("prefill",)),
        RegionalRun(3, 1, None, ("decode",)),
        RegionalRun(0, 0, "no two layers of one structure", ("token_embedding",)),
    ]


class Attending(nn.Module):
    """A layer reading a cache it is given, writing it in place first if asked."""

    def __init__(self, writes: bool) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.writes = writes

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        k = self.linear(x)
        if self.writes:
            cache = cache.index_copy_(0, torch.arange(4), k)
        return torch.relu(k @ cache.t() @ cache)


class SharedCache(nn.Module):
    """One cache for all layers, written in place by the `writers` layers or by the rest."""

    def __init__(self, writers: tuple[int, ...], rest_writes: bool = False) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(6, 8))
        self.layers = nn.ModuleList(Attending(i in writers) for i in range(3))
        self.rest_writes = rest_writes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rest_writes:
            self.cache.index_copy_(0, torch.arange(4), x)
        for layer in self.layers:
            x = layer(x, self.cache)
        return x


class ViewWriting(nn.Module):
    """A layer writing its cache through a view (narrow().copy_)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("k_cache", torch.zeros(6, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.linear(x)
        return torch.relu(self.k_cache.narrow(0, 1, 4).copy_(k) + k)


@pytest.mark.parametrize(
    ("model", "why"),
    [
        (lambda: SharedCache(writers=(0,)), "which layers.1 uses too"),
        (lambda: SharedCache(writers=(0, 1)), "which layers.1 writes too"),
        (lambda: SharedCache(writers=(), rest_writes=True), "outside a layer"),
        (lambda: Stack(ViewWriting), "writes a view of b_layers_0_k_cache"),
    ],
    ids=["read-by-another-layer", "written-by-two-layers", "written-in-the-rest", "view"],
)
def test_buffers_written_beyond_one_layer_s_own_run_stock(model: Any, why: str) -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        program = torch.export.export(model().eval(), (torch.randn(4, 8),))
    found, reason = program_regions(program)
    assert found is None and why in str(reason), reason


def test_a_buffer_written_by_one_layer_and_read_by_another_runs_stock() -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        program = torch.export.export(SharedCache(writers=(0,)).eval(), (torch.randn(4, 8),))
    stock, mine, runs = regional_against_stock("cache-read-by-another-layer", program)
    assert mine == stock
    assert [run.stock_because for run in runs] == [
        "index_copy_ writes b_cache, which layers.1 uses too (aten.index_copy_.default)"
    ]


class Shifted(nn.Module):
    """A layer reading a tensor its parent wrote in place (as OPT's layers read its mask)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + shift


class ShiftedStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Shifted() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shift = torch.zeros(4, 8)
        shift.copy_(x * 2)
        for layer in self.layers:
            x = layer(x, shift)
        return x


def test_a_layer_reading_a_tensor_written_in_place_elsewhere_runs_stock() -> None:
    """Functionalization emits a read of a tensor written in place where it is read next, with
    the reader's metadata; a layer cut out alone reads a fresh input instead."""
    torch.manual_seed(0)  # the same weights in each run: stock's digest in the table
    program = exported(ShiftedStack())
    stock, mine, runs = regional_against_stock("written-in-place-elsewhere", program)
    assert mine == stock
    assert [run.stock_because for run in runs] == [
        "layers.0 reads copy_, a tensor written in place elsewhere"
    ]


@pytest.mark.parametrize(
    "model",
    [lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU()), lambda: Stack(Plain, count=1)],
)
def test_layers_of_no_common_structure_run_stock(model: Any) -> None:
    assert program_regions(exported(model())) == (None, "no two layers of one structure")


class Counts(nn.Module):
    """Layers over as many rows as a tensor says: `.item()` makes an unbacked symbol."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = Stack(Plain)

    def forward(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        count = rows.item()
        torch._check(count >= 1)
        torch._check(count <= x.shape[0])
        return self.layers(x[:count])


def test_unbacked_symbols_run_stock() -> None:
    program = torch.export.export(Counts().eval(), (torch.randn(4, 8), torch.tensor(2)))
    why = "unbacked symbols in a tensor's size (u0 in slice_1)"
    assert program_regions(program) == (None, why)


def test_calls_the_argument_does_not_cover_run_stock() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

    program = exported(Stack(Plain))
    xnnpack = {"forward": [XnnpackPartitioner()]}
    config = EdgeCompileConfig()
    assert why_stock_call(xnnpack, {"forward": program}, config, None, False) is None
    assert why_stock_call(xnnpack, {"forward": program}, config, None, True) is not None
    assert why_stock_call(xnnpack, {"forward": program}, config, {"n": 1}, False) is None
    two = {"forward": program, "other": program}
    assert why_stock_call(xnnpack, two, config, None, False) == "no partitioner for other"
    other = {"forward": [AddMulPartitionerDemo()]}
    assert "other than XNNPACK" in str(why_stock_call(other, {"forward": program}, config, None, 0))
    optimum = EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True)
    assert why_stock_call(xnnpack, {"forward": program}, optimum, None, False) is None
    preserving = EdgeCompileConfig(_skip_dim_order=True, preserve_ops=[torch.ops.aten.silu.default])
    assert why_stock_call(xnnpack, {"forward": program}, preserving, None, False) == (
        "EdgeCompileConfig.preserve_ops is not the default"
    )


def test_other_versions_run_stock(monkeypatch: pytest.MonkeyPatch) -> None:
    from executorch.exir.program import _program

    stock = _program._gen_edge_manager_for_partitioners
    with RegionalEdge().installed():  # the validated versions: installed
        assert _program._gen_edge_manager_for_partitioners is not stock
    assert _program._gen_edge_manager_for_partitioners is stock
    monkeypatch.setattr(edge_speedups, "VALIDATED_VERSIONS", {"torch": "0", "executorch": "0"})
    with RegionalEdge().installed():
        assert _program._gen_edge_manager_for_partitioners is stock


class Requantized(nn.Module):
    """A layer that hands the next one its output quantized and dequantized (its q/dq chain
    ends in the next layer's linear), or calls a torchao or llama op the argument does not cover."""

    def __init__(self, op: str = "dequantize_affine") -> None:
        super().__init__()
        self.linear = nn.Linear(32, 32)
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.linear(x))
        block, low, high = [1, 32], -128, 127
        scale, zero = torch.ops.torchao.choose_qparams_affine(
            y, "ASYMMETRIC", block, torch.int8, low, high, None, None, torch.int8
        )
        if self.op == "dequantize_affine":
            q = torch.ops.torchao.quantize_affine(y, block, scale, zero, torch.int8, low, high)
            return torch.ops.torchao.dequantize_affine(q, block, scale, zero, torch.int8, low, high)
        if self.op == "hadamard":
            return torch.ops.llama.fast_hadamard_transform(y)
        q = torch.ops.torchao.quantize_affine_float8_non_decomposed(y, scale, torch.float8_e4m3fn)
        return torch.ops.torchao.dequantize_affine_float8_non_decomposed(q, scale, torch.float32)


@pytest.mark.parametrize(
    ("op", "why"),
    [
        (
            "dequantize_affine",
            "a q/dq chain crosses from layers.0 to layers.1 (dequantize_affine, linear_1)",
        ),
        (
            "float8",
            "an op of namespace torchao (torchao.quantize_affine_float8_non_decomposed.default)",
        ),
        ("hadamard", "an op of namespace llama (llama.fast_hadamard_transform.default)"),
    ],
)
def test_q_dq_chains_across_layers_and_ops_not_argued_run_stock(op: str, why: str) -> None:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 (and torch.ops.llama)
    import torchao.quantization.quant_primitives  # noqa: F401 (registers torch.ops.torchao)

    stack = Stack(Requantized)
    for layer in stack.layers:
        layer.op = op
    torch.manual_seed(0)
    program = torch.export.export(stack.eval(), (torch.randn(2, 32),), strict=False)
    assert program_regions(program) == (None, why)
