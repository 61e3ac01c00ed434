"""Regional edge generation (lowering/region_edge.py) gives the stock script's bytes, and
ExecuTorch's own edge generation runs wherever a gate does not hold.

Stock here is tests/stock.py: a plain ExecuTorch run with nothing of lowerd's installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch
from executorch.exir.pass_base import ExportPass, PassResult
from torch import nn

from lowerd.cache.store import BlobStore
from lowerd.daemon.diagnostics import result_diagnostics, site_of
from lowerd.lowering import edge_speedups, template_store
from lowerd.lowering.build import build_target
from lowerd.lowering.edge_speedups import EdgeSpeedups
from lowerd.lowering.region_edge import (
    CUSTOM_OPS,
    QDQ_OPS,
    RegionalEdge,
    RegionalRun,
    program_regions,
    why_stock_call,
)
from lowerd.lowering.region_passes import why_passes
from lowerd.lowering.template_store import TemplateStore
from lowerd.project.config import load_config
from lowerd.project.edge_generation import EdgeGeneration
from lowerd.project.explain import explain_targets
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode, encode

from helpers import PROJECTS
from stock import call_entry, forget_project_modules, importable_copy, sha256, stock_pte

ENTRY = "models/llama.py:make"


@pytest.fixture(scope="module")
def layers_built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """tests/projects/layers built by lowerd: the .pte's digest, the stock script's, and what
    regional edge generation did."""
    folder = tmp_path_factory.mktemp("region-edge")
    with importable_copy(PROJECTS / "layers", folder / "layers") as root:
        seen: list[RegionalEdge] = []
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(RegionalEdge, "installed", spying(seen, RegionalEdge.installed))
            config = load_config(root / "pyproject.toml")
            forget_project_modules(root)
            result = build_target(config, config.targets["llama"], BlobStore(folder / "cache"))
            assert result.status == "ok", result.error
            stock = sha256(stock_pte(root, ENTRY, ["xnnpack"]))
            edited = rebuilt_with_layer_0_plain(root, config, BlobStore(folder / "cache"))
        [regional, again] = seen
        edited["runs"] = again.runs
        return {
            **{"sha256": result.sha256, "stock": stock, "runs": regional.runs, "edited": edited},
            **{"result": result, "config": config},
        }


def rebuilt_with_layer_0_plain(root: Any, config: Any, store: BlobStore) -> dict[str, Any]:
    """Layer 0's activation back to SiLU, rebuilt with the first build's cache: layer 0 becomes
    the plain layers' template (layer 1 its copy) and layer 3 its own GELU template, so every
    unedited layer is made from another template than before."""
    model = root / "models" / "llama.py"
    source = model.read_text()
    gelu = "    layers[0].mlp.act_fn = nn.GELU()\n"
    assert gelu in source
    model.write_text(source.replace(gelu, ""))
    forget_project_modules(root)
    result = build_target(config, config.targets["llama"], store)
    assert result.status == "ok", result.error
    stock = sha256(stock_pte(root, ENTRY, ["xnnpack"]))
    generation = result.methods["forward"].edge_generation
    return {"sha256": result.sha256, "stock": stock, "cache": result.cache, "says": generation}


def spying(seen: list[RegionalEdge], installed: Any) -> Any:
    def spied(self: RegionalEdge) -> Any:
        seen.append(self)
        return installed(self)

    return spied


def test_edits_at_first_middle_last_layer_weights_and_a_refused_op_give_stock_s_bytes(
    layers_built: dict[str, Any],
) -> None:
    """Layers 0 and 3 (GELU; 3's weights scaled) share one template, layer 1 (the plain
    structure) and layer 2 (cumsum: XNNPACK refuses it, its partitions split) each their own, and
    the rest its own: the .pte is the stock script's."""
    assert layers_built["sha256"] == layers_built["stock"]
    assert layers_built["runs"] == [RegionalRun(regions=5, templates=4, stock_because=None)]


def test_a_one_layer_edit_misses_only_the_edited_partition(layers_built: dict[str, Any]) -> None:
    """Each copied layer's weight placeholders describe its own weights (their `desc`, in the
    partition key), not its template's: after an edit that changes every layer's template, only
    the partition holding layer 0's activation is preprocessed again. The three layer templates
    are read back from the first build's store (template_store.py), each for another layer than
    it was made of (the plain one made of layer 1 serves layer 0, the GELU one made of layer 0
    serves layer 3); the rest is generated again (its edge nodes take values its inputs carry)."""
    edited = layers_built["edited"]
    assert edited["sha256"] == edited["stock"]
    assert edited["runs"] == [RegionalRun(regions=5, templates=4, stock_because=None, reused=3)]
    assert edited["says"] == EdgeGeneration.regional(regions=5, templates=4, reused=3)
    assert edited["cache"].misses == 1 and edited["cache"].hits > 1


class Stack(nn.Module):
    def __init__(self, layer: type[nn.Module], count: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layer() for _ in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def exported(model: nn.Module, **options: Any) -> Any:
    torch.manual_seed(0)
    return torch.export.export(model.eval(), (torch.randn(4, 8),), **options)


def regional_and_stock(
    program: Any, options: Callable[[], dict[str, Any]] = dict, edges: list[Any] | None = None
) -> tuple[bytes, bytes, list[RegionalRun]]:
    """The program lowered with XNNPACK by ExecuTorch as it is, and again with regional edge
    generation installed inside the replay skipping (as lowerd installs them, given the same
    transform passes); `options` makes to_edge_transform_and_lower's other arguments afresh for
    each (it adds to the config); `edges` gets the regional lowering's manager."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    def lowered(options: dict[str, Any]) -> bytes:
        edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()], **options)
        if edges is not None:
            edges.append(edge)
        return bytes(edge.to_executorch().buffer)

    stock = lowered(options())
    mine_options = options()
    regional = RegionalEdge(mine_options.get("transform_passes"))
    with EdgeSpeedups(None).installed(), regional.installed():
        mine = lowered(mine_options)
    return stock, mine, regional.runs


def replay_metadata(manager: Any) -> list[Any]:
    """Per node of an edge manager's program and of its delegates' programs, the metadata that
    strict export adds and the replays copy from node to node (and onto a weight placeholder
    from its last user): neither reaches the bytes, and partition_key.py keys both."""
    module = manager.exported_program().graph_module
    lowered = [getattr(module, str(n.target)) for n in module.graph.nodes if n.op == "get_attr"]
    graphs = [module.graph, *(each.original_module.graph for each in lowered)]
    return [
        (
            node.name,
            node.meta.get("source_fn_stack"),
            node.meta.get("torch_fn"),
            node.meta.get("example_value", "none") is node.meta.get("val"),
        )
        for graph in graphs
        for node in graph.nodes
    ]


def test_a_corrupt_stored_template_is_a_miss_and_stock_s_bytes(tmp_path: Any) -> None:
    """A template entry whose payload does not decode (truncated, its digest the store's own)
    is generated again: a miss, counted, and the .pte is stock's."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program = exported(Stack(Plain))
    store = BlobStore(tmp_path / "cache")
    stock = bytes(
        to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        .to_executorch()
        .buffer
    )
    runs = []
    for corrupt in (False, True):
        templates = TemplateStore(store)
        if corrupt:
            for path in (tmp_path / "cache").rglob(f"*.{template_store.KIND}"):
                key = path.name.split(".")[0]
                payload = store.get(key, template_store.KIND)
                assert payload is not None
                store.put(key, payload[: len(payload) // 2], template_store.KIND)
        regional = RegionalEdge(store=templates)
        with EdgeSpeedups(None).installed(), regional.installed():
            edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
            mine = bytes(edge.to_executorch().buffer)
        assert sha256(mine) == sha256(stock)
        runs.append((regional.runs, templates.stored, templates.unreadable))
    made = [RegionalRun(regions=3, templates=1, stock_because=None)]
    assert runs[0][0] == made and runs[0][1] >= 1
    assert runs[1][0] == made and runs[1][2] == runs[0][1]


def test_repeated_layers_without_an_llama_are_generated_by_region() -> None:
    stock, mine, runs = regional_and_stock(exported(Stack(Plain)))
    assert sha256(mine) == sha256(stock)
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


# Part of optimum's save_config_to_constant_methods (get_head_dim is a float).
CONSTANT_METHODS = {"get_max_seq_len": 64, "use_kv_cache": True, "get_head_dim": 16.0}


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


def optimum_passes() -> Any:
    """The optimum project's transform passes (tests/projects/optimum/passes.py), as its
    recipe's written out."""
    return call_entry(PROJECTS / "optimum", "passes.py:transform_passes")


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
    edges: list[Any] = []
    stock, mine, runs = regional_and_stock(program, optimum, edges)
    assert sha256(mine) == sha256(stock)
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
    stock, mine, runs = regional_and_stock(programs)
    assert sha256(mine) == sha256(stock)
    assert runs == [
        RegionalRun(3, 1, None, ("prefill",)),
        RegionalRun(3, 1, None, ("decode",)),
        RegionalRun(0, 0, "no two layers of one structure", ("token_embedding",)),
    ]


class Cached(nn.Module):
    """A layer with its own caches written in place (as ExecuTorch's llama KVCache or
    transformers' StaticCache, by index_copy_), and a step counter whose write nothing reads.
    Written in another order than registered (the value cache first, the counter last), so
    the BUFFER_MUTATION outputs' order (by placeholder) is not the order of the writes."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("steps", torch.zeros(1))
        self.register_buffer("k_cache", torch.zeros(6, 8), persistent=False)
        self.register_buffer("v_cache", torch.zeros(6, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k = self.linear(x)
        positions = torch.arange(4)  # as a KV cache's input_pos
        self.v_cache.index_copy_(0, positions, k * 2)
        self.k_cache.index_copy_(0, positions, k)
        self.steps.add_(1)
        return torch.relu(k @ self.k_cache.t() @ self.v_cache)


def test_layers_writing_their_own_caches_are_generated_by_region() -> None:
    """Each layer's cut holds its caches as buffer inputs with their writes; the assembly makes
    the BUFFER_MUTATION outputs in the order of the buffers' placeholders, as stock's
    functionalizing replay does (by the order of the writes, the bytes differ)."""
    torch.manual_seed(0)
    with torch.no_grad():  # as ExecuTorch's exports: a cache written from grad is refused
        program = torch.export.export(Stack(Cached).eval(), (torch.randn(4, 8),))
    edges: list[Any] = []
    stock, mine, runs = regional_and_stock(program, edges=edges)
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]
    outputs = edges[-1].exported_program().graph_signature.output_specs
    assert [spec.target for spec in outputs if spec.kind.name == "BUFFER_MUTATION"] == [
        f"layers.{i}.{name}" for i in range(3) for name in ("steps", "k_cache", "v_cache")
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
    stock, mine, runs = regional_and_stock(program)
    assert sha256(mine) == sha256(stock)
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
    stock, mine, runs = regional_and_stock(exported(ShiftedStack()))
    assert sha256(mine) == sha256(stock)
    assert [run.stock_because for run in runs] == [
        "layers.0 reads copy_, a tensor written in place elsewhere"
    ]


@pytest.mark.parametrize(
    "model",
    [lambda: nn.Sequential(nn.Linear(8, 8), nn.ReLU()), lambda: Stack(Plain, count=1)],
)
def test_layers_of_no_common_structure_run_stock(model: Any) -> None:
    assert program_regions(exported(model())) == (None, "no two layers of one structure")


def test_a_dynamic_sequence_is_generated_by_region() -> None:
    """A Llama with a dynamic sequence length (backed `s0`): the rest binds it once after the
    placeholders and every layer reads that binding; each layer template reads it as its cut's
    first user input. The .pte (upper-bound sizes, the sym_size ops outside the delegates) is
    the stock script's."""
    from architectures import dynamic_llama

    program = dynamic_llama()
    assert program.range_constraints  # dynamic indeed
    stock, mine, runs = regional_and_stock(program)
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=3, templates=2, stock_because=None)]


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
    found, why = program_regions(program)
    assert found is None and str(why).startswith("unbacked symbols (u")


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


def test_the_result_explain_and_the_editor_name_the_regional_path(
    layers_built: dict[str, Any],
) -> None:
    """What ran is in the build's result (`--json`, the build record), `lowerd explain`'s lines
    and the coverage diagnostic at the entry, not only in the daemon's debug log."""
    result, config = layers_built["result"], layers_built["config"]
    regional = EdgeGeneration.regional(regions=5, templates=4)
    [(method, report)] = result.methods.items()
    assert report.edge_generation == regional
    document = json.loads(json.dumps(encode(result)))  # as `--json` prints it
    written = document["methods"][method]["edge_generation"]
    assert written == {"path": "regional", "regions": 5, "templates": 4, "words": regional.words}
    assert decode(TargetResult, document).methods[method].edge_generation == regional
    # The record is the edited build's (regional too, its layer templates read from the
    # cache), read back through the record's checks.
    [explained] = explain_targets(config, ["llama"]).targets
    edited = EdgeGeneration.regional(regions=5, templates=4, reused=3)
    assert explained.edge_generation == {method: edited}
    assert f"  edge generation of {method}: {edited.words}" in explained.lines
    entry = site_of(result.entry, config.root)
    assert entry is not None
    at_entry = result_diagnostics(result, config.root, None, "warning")[entry.path]
    [coverage] = [
        d for d in at_entry if d.code == "coverage" and d.range.start.line + 1 == entry.line
    ]
    assert f"edge generation: {regional.words}" in coverage.message


def test_8da4w_linears_are_generated_by_region() -> None:
    """tests/projects/torchaoquant's three Llama MLP blocks and head, quantized as optimum's
    recipe does (8da4w, hqq, linear_divisible) and exported non-strict: torchao's
    choose_qparams/quantize/dequantize affine ops around each linear, the head's chain reading
    the last layer's output. The .pte is the stock script's, by region."""
    from testkit.stock_recipe import optimum_quantize_model

    model, example = call_entry(PROJECTS / "torchaoquant", "models/linears.py:make_layers")
    optimum_quantize_model(model, "8da4w")
    with torch.no_grad():
        program = torch.export.export(model, example, strict=False)
    assert any(str(node.target) in QDQ_OPS for node in program.graph.nodes)
    stock, mine, runs = regional_and_stock(program)
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=4, templates=2, stock_because=None)]


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


class Attention(nn.Module):
    """Attention by ExecuTorch's custom_sdpa (optimum's recipe's), start_pos a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))
        self.out = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (linear(x).view(1, 4, 2, 16) for linear in self.qkv)
        y = torch.ops.llama.custom_sdpa(q, k, v, 0, None, 0.0, True)
        return x + self.out(y.reshape(1, 4, 32))


def test_custom_sdpa_with_a_constant_start_pos_is_generated_by_region() -> None:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 (registers llama's ops)

    torch.manual_seed(0)
    program = torch.export.export(Stack(Attention).eval(), (torch.randn(1, 4, 32),))
    assert any(str(node.target) in CUSTOM_OPS for node in program.graph.nodes)
    stock, mine, runs = regional_and_stock(program)
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=3, templates=1, stock_because=None)]


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
