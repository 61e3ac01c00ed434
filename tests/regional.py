"""What the regional edge generation tests share (tests/test_region_*.py): small layer stacks, the
lowering of a program by stock ExecuTorch and by region side by side, and the metadata the replays
copy.

Stock here is a plain ExecuTorch run with nothing of lowerd's installed (as tests/stock.py's).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lowerd.cache.store import BlobStore
from lowerd.lowering import template_store
from lowerd.lowering.edge_speedups import EdgeSpeedups
from lowerd.lowering.region_edge import RegionalEdge, RegionalRun
from lowerd.lowering.template_store import TemplateStore

from helpers import PROJECTS
from known_stock import known_or_live, program_digest
from stock import call_entry, sha256

# Part of optimum's save_config_to_constant_methods (get_head_dim is a float).
CONSTANT_METHODS = {"get_max_seq_len": 64, "use_kv_cache": True, "get_head_dim": 16.0}


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


def lowered(
    program: Any, options: dict[str, Any] | None = None, edges: list[Any] | None = None
) -> bytes:
    """The program lowered with XNNPACK by to_edge_transform_and_lower (with `options`, its
    other arguments), as whatever is installed around the call makes it; `edges` gets its
    manager."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()], **options or {})
    if edges is not None:
        edges.append(edge)
    return bytes(edge.to_executorch().buffer)


def regional_and_stock(
    program: Any,
    options: Callable[[], dict[str, Any]] = dict,
    edges: list[Any] | None = None,
    again: Callable[[], Any] | None = None,
) -> tuple[bytes, bytes, list[RegionalRun]]:
    """The program lowered with XNNPACK by ExecuTorch as it is, and again with regional edge
    generation installed inside the replay skipping (as lowerd installs them, given the same
    transform passes); `options` makes to_edge_transform_and_lower's other arguments afresh for
    each (it adds to the config); `edges` gets the regional lowering's manager; `again`, if
    given, exports the program afresh for the regional lowering (as lowerd lowers a program of
    its own export)."""
    stock = lowered(program, options(), edges)
    mine_options = options()
    regional = RegionalEdge(mine_options.get("transform_passes"))
    if again is not None:
        program = again()
    with EdgeSpeedups(None).installed(), regional.installed():
        mine = lowered(program, mine_options, edges)
    return stock, mine, regional.runs


def regional_against_stock(
    name: str,
    program: Any,
    options: Callable[[], dict[str, Any]] = dict,
    again: Callable[[], Any] | None = None,
) -> tuple[str, str, list[RegionalRun]]:
    """regional_and_stock's digests, stock's from tests/stock_digests.json under `name` where it
    holds this program with these versions (tests/known_stock.py), else lowered live as
    regional_and_stock does, before the regional lowering. For the tests that read only the
    bytes of the stock run (not its manager)."""
    live = lambda: sha256(lowered(program, options()))  # noqa: E731
    stock = known_or_live(name, program_digest(program), live)
    mine_options = options()
    regional = RegionalEdge(mine_options.get("transform_passes"))
    if again is not None:
        program = again()
    with EdgeSpeedups(None).installed(), regional.installed():
        mine = lowered(program, mine_options)
    return stock, sha256(mine), regional.runs


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


def partition_keys(program: Any) -> list[str]:
    """Each delegate's partition key (preprocess_cache.py's: XNNPACK's stable naming)."""
    from lowerd.lowering.partition_key import key_details

    module = program.graph_module
    lowered = [getattr(module, str(n.target)) for n in module.graph.nodes if n.op == "get_attr"]
    return [
        key_details(
            each.backend_id, [each.original_module], [each.compile_specs], stable_naming=True
        ).digest()
        for each in lowered
    ]


def spying(seen: list[RegionalEdge], installed: Any) -> Any:
    """RegionalEdge.installed that first appends the RegionalEdge to `seen`."""

    def spied(self: RegionalEdge) -> Any:
        seen.append(self)
        return installed(self)

    return spied


def optimum_passes() -> Any:
    """The optimum project's transform passes (tests/projects/optimum/passes.py), as its
    recipe's written out."""
    return call_entry(PROJECTS / "optimum", "passes.py:transform_passes")


def lowered_through(
    program: Any, templates: TemplateStore, edges: list[Any] | None = None
) -> tuple[bytes, list[RegionalRun]]:
    """The program lowered with XNNPACK, regional edge generation reading and writing its
    templates through `templates`; its manager appended to `edges`."""
    regional = RegionalEdge(store=templates)
    with EdgeSpeedups(None).installed(), regional.installed():
        return lowered(program, None, edges), regional.runs


def rewrite_templates(store: BlobStore, folder: Path, rewrite: Callable[[bytes], bytes]) -> int:
    """Every template entry of the store in `folder` rewritten, under its own key and a digest
    the store's own (what a reader meets as a damaged or foreign entry); how many there were."""
    paths = list(folder.rglob(f"*.{template_store.KIND}"))
    for path in paths:
        key = path.name.split(".")[0]
        payload = store.get(key, template_store.KIND)
        assert payload is not None
        store.put(key, rewrite(payload), template_store.KIND)
    return len(paths)
