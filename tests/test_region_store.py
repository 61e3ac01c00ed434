"""Regional edge generation (lowering/region_edge.py) on the flows and stores issue 31 left:
transformers' static cache exported strict, the weights' order and names the replays give, and
the gates' fallbacks. Each compares the .pte's sha256 with stock ExecuTorch's (the same
program lowered with nothing of lowerd's installed) and checks which path ran.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from typing import Any

import pytest
import torch
from torch import nn

from lowerd.cache.store import BlobStore
from lowerd.lowering.region_edge import RegionalRun
from lowerd.lowering.template_store import TemplateStore

from helpers import PROJECTS
from regional import (
    Plain,
    Stack,
    exported,
    lowered,
    lowered_through,
    partition_keys,
    regional_against_stock,
    replay_metadata,
    rewrite_templates,
)
from stock import importable_copy, sha256

EXAMPLES = PROJECTS.parents[1] / "examples"


@pytest.fixture(scope="module")
def static_cache_program(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """examples/models/llm.py's tiny Llama in transformers' static-cache wrapper (optimum's
    recipe without custom SDPA and cache), exported as its export code does: strict, under
    no_grad, with a dynamic sequence."""
    folder = tmp_path_factory.mktemp("static-cache")
    with importable_copy(EXAMPLES, folder / "examples") as root:
        sys.path.insert(0, str(root))
        llm = importlib.import_module("models.llm")
        method = llm.exportable(llm.tiny_llama("sdpa"), custom=False)
        with torch.no_grad():
            return torch.export.export(
                method.module,
                tuple(method.args),
                dict(method.kwargs),
                dynamic_shapes=method.dynamic_shapes,
                strict=True,
            )


@pytest.fixture(scope="module")
def static_cache_builds(
    static_cache_program: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The static-cache program lowered under no_grad (as the stock script lowers it) by stock
    ExecuTorch, then by region writing its templates into an empty store (every template
    generated, as a build without a store generates them): their bytes, the regional runs, the
    store's folder and its TemplateStore, and both managers (stock's, then the regional one's).
    The two tests below read this one pair of builds; the second copies the folder first."""
    edges: list[Any] = []
    folder = tmp_path_factory.mktemp("static-cache-store") / "cache"
    with torch.no_grad():
        stock = lowered(static_cache_program, None, edges)
        first = TemplateStore(BlobStore(folder))
        made = lowered_through(static_cache_program, first, edges)
    return {"stock": stock, "made": made, "first": first, "folder": folder, "edges": edges}


def test_transformers_static_cache_is_generated_by_region(static_cache_builds: Any) -> None:
    """Strict export names the cache buffers by the path dynamo read them through
    (`b_static_cache_layers_0_keys` for `key_cache_0`) and places them after the rotary
    embedding's; the replays rename them from their targets and place them in the unlifted
    module's order (replay_inputs.py): the assembly does too, and the .pte is stock's (it differed
    in the buffers' order before). Lowered under no_grad as the stock script lowers it."""
    stock, (mine, runs) = static_cache_builds["stock"], static_cache_builds["made"]
    assert sha256(mine) == sha256(stock)
    assert runs == [RegionalRun(regions=3, templates=2, stock_because=None)]


def test_a_dynamic_program_s_templates_are_kept_and_read_back_with_stock_s_sizes(
    static_cache_program: Any, static_cache_builds: Any, tmp_path: Any
) -> None:
    """A dynamic sequence puts the program's backed symbol (`s11`) in a template's sizes and
    sym nodes, and its layers write their caches in place (BUFFER_MUTATION outputs): the store
    holds both (size_expressions.py; the buffer by its input place), the next build reads the
    layer's template back, and its bytes, partition keys, values and range constraints are
    stock's (before, a symbolic size made every template of this flow unstorable, so each edit
    generated them all again)."""
    edges = list(static_cache_builds["edges"])  # stock's manager, then the made build's
    stock, made, first = (static_cache_builds[k] for k in ("stock", "made", "first"))
    shutil.copytree(static_cache_builds["folder"], tmp_path / "cache")
    with torch.no_grad():
        store = BlobStore(tmp_path / "cache")
        second = TemplateStore(store)
        read = lowered_through(static_cache_program, second, edges)
    assert sha256(made[0]) == sha256(read[0]) == sha256(stock)
    # the layer's template and the rest's (read back for the rest alone, its metadata the same)
    assert made[1] == [RegionalRun(3, 2, None, reused=0)] and first.stored == 2
    assert read[1] == [RegionalRun(3, 2, None, reused=2)] and second.stored == 0
    stock_edge, made_edge, read_edge = (edge.exported_program() for edge in edges)
    # Equal to the keys of the template made in the build (one of which is not stock's: the
    # rest's rotary `cat` carries torch.compiler.disable's `custom` annotation naming the
    # function around the replay, `wrapper`, where stock's names `cat`; bytes are equal)
    assert partition_keys(read_edge) == partition_keys(made_edge)
    assert _values(read_edge) == _values(stock_edge)
    assert str(read_edge.range_constraints) == str(stock_edge.range_constraints)
    assert replay_metadata(edges[2]) == replay_metadata(edges[0])
    # The rest's template (its lifted constants' metadata found in none of its nodes: stored
    # for the rest alone) is generated again once a line above the forward moved: here its
    # nodes' stack traces rewritten, and back as they were after.
    rest = [n for n in static_cache_program.graph.nodes if "layers" not in _stack(n)]
    traces = {node: node.meta["stack_trace"] for node in rest if "stack_trace" in node.meta}
    try:
        for node, trace in traces.items():
            node.meta["stack_trace"] = f"{trace}\n  (a line moved)"
        third = TemplateStore(store)
        with torch.no_grad():
            moved = lowered_through(static_cache_program, third)
    finally:
        for node, trace in traces.items():
            node.meta["stack_trace"] = trace
    assert sha256(moved[0]) == sha256(stock)
    assert moved[1] == [RegionalRun(3, 2, None, reused=1)] and not third.problems


def _stack(node: Any) -> str:
    return str(node.meta.get("nn_module_stack"))


def _values(program: Any) -> list[tuple[str, str]]:
    """Each node's sizes (a tensor's shape and stride, a sym node's value) as written: a
    symbolic size by its expression."""
    written = []
    for node in program.graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            value = (tuple(value.shape), value.stride())
        written.append((node.name, str(value)))
    return written


class AlikeNames(nn.Module):
    """Two weights whose targets the replays would name alike (`x_y` and `x.y`: `p_x_y`)."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = Stack(Plain)
        self.x_y = nn.Parameter(torch.ones(8))
        self.x = nn.Module()
        self.x.y = nn.Parameter(torch.full((8,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stack(x) * self.x_y + self.x.y


def test_weights_the_replays_would_name_alike_run_stock() -> None:
    torch.manual_seed(0)  # the same weights in each run: stock's digest in the table
    stock, mine, runs = regional_against_stock("alike-names", exported(AlikeNames()))
    assert mine == stock
    [run] = runs
    assert run.stock_because is not None and "named alike" in run.stock_because


@pytest.fixture(scope="module")
def strict_stack(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A small stack exported strict, lowered by stock ExecuTorch and then by region writing
    its template into an empty store: the program, stock's bytes, the regional build's bytes
    and runs, its TemplateStore and folder, and both managers (stock's, then the regional
    one's). The two tests below read these builds; each copies the folder before building on
    it."""
    with torch.no_grad():
        program = exported(Stack(Plain), strict=True)
    edges: list[Any] = []
    stock = lowered(program, None, edges)
    folder = tmp_path_factory.mktemp("strict-stack") / "cache"
    first = TemplateStore(BlobStore(folder))
    made = lowered_through(program, first, edges)
    return {
        "program": program,
        "stock": stock,
        "made": made,
        "first": first,
        "folder": folder,
        "edges": edges,
    }


def test_a_strict_export_s_template_is_kept_and_read_back_with_stock_s_metadata(
    strict_stack: Any, tmp_path: Any
) -> None:
    """Strict export adds `example_value` (the val's own object), `source_fn_stack` (module
    classes and torch's functions) and `eager_input_vals` to a template's nodes: the store holds
    them, the next build reads the template back, and bytes and metadata are stock's."""
    program, stock, made, first = (strict_stack[k] for k in ("program", "stock", "made", "first"))
    edges = list(strict_stack["edges"])  # stock's manager, then the made build's
    shutil.copytree(strict_stack["folder"], tmp_path / "cache")
    second = TemplateStore(BlobStore(tmp_path / "cache"))
    read = lowered_through(program, second, edges)
    assert sha256(made[0]) == sha256(read[0]) == sha256(stock)
    assert made[1] == [RegionalRun(3, 1, None, reused=0)] and first.stored == 1
    assert read[1] == [RegionalRun(3, 1, None, reused=1)] and second.stored == 0
    assert replay_metadata(edges[1]) == replay_metadata(edges[0])
    assert replay_metadata(edges[2]) == replay_metadata(edges[0])


def test_a_template_naming_a_callable_no_imported_module_holds_is_a_miss(
    strict_stack: Any, tmp_path: Any
) -> None:
    """Reading never imports: an entry whose source_fn_stack names a module no import made (here
    the entry rewritten so, under its own digest) is unreadable, generated again, stock's bytes."""
    program, stock = strict_stack["program"], strict_stack["stock"]
    shutil.copytree(strict_stack["folder"], tmp_path / "cache")  # the made build's template
    store = BlobStore(tmp_path / "cache")

    def elsewhere(payload: bytes) -> bytes:
        return payload.replace(b"torch.nn.modules.linear", b"torch.nn.modules.lineaX")

    assert rewrite_templates(store, tmp_path / "cache", elsewhere) == 1
    templates = TemplateStore(store)
    pte, runs = lowered_through(program, templates)
    assert sha256(pte) == sha256(stock)
    assert runs == [RegionalRun(3, 1, None)] and templates.unreadable == 1
    assert "torch.nn.modules.lineaX" in templates.problems[0]
