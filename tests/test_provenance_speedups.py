"""Provenance chains shared, not deep-copied (lowering/provenance_speedups.py): after export,
an unlift and a second export, edge generation, XNNPACK's partitioning and to_executorch, every
node's `from_node` chain and the .pte bytes are stock's."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import torch
from torch import nn

from lowerd.lowering import edge_speedups
from lowerd.lowering.provenance_speedups import provenance_shared


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x))).cumsum(-1)  # cumsum: not XNNPACK's


def _lowered() -> tuple[bytes, list[list[Any]], int]:
    """The .pte of the block exported twice (the second export of the first one's module, as
    optimum's module passes make it), lowered to XNNPACK; each graph's provenance; and how many
    NodeSource objects hold it."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    torch.manual_seed(0)
    args = (torch.randn(3, 8),)
    shapes = ({0: torch.export.Dim("rows", max=16)},)
    first = torch.export.export(_Block().eval(), args, dynamic_shapes=shapes)
    second = torch.export.export(first.module(), args, dynamic_shapes=shapes)
    edge = to_edge_transform_and_lower(second, partitioner=[XnnpackPartitioner()])
    graphs = [edge.exported_program().graph_module]
    graphs += [
        module.original_module.graph_module
        for module in graphs[0].children()
        if isinstance(module, LoweredBackendModule)
    ]
    program = edge.to_executorch()
    graphs.append(program.exported_program().graph_module)
    objects: set[int] = set()
    chains = [_chains(graph, objects) for graph in graphs]
    return bytes(program.buffer), chains, len(objects)


def _chains(graph_module: torch.fx.GraphModule, objects: set[int]) -> list[Any]:
    """Each node's provenance as data, graph ids numbered in order of first appearance (an id
    is an object's address: equal chains from two runs number alike); `objects` gains the id of
    each NodeSource met."""
    numbered: dict[int, int] = {}

    def plain(source: Any) -> Any:
        objects.add(id(source))
        data = dict(source.to_dict())
        data["graph_id"] = numbered.setdefault(data["graph_id"], len(numbered))
        data["from_node"] = [plain(s) for s in source.from_node]
        return data

    return [
        (node.name, [plain(s) for s in node.meta.get("from_node", [])])
        for node in graph_module.graph.nodes
    ]


@pytest.fixture(scope="module")
def stock() -> tuple[bytes, list[list[Any]], int]:
    return _lowered()


def test_shared_chains_are_stock_s_and_so_are_the_bytes(
    stock: tuple[bytes, list[list[Any]], int],
) -> None:
    with provenance_shared():
        pte, chains, objects = _lowered()
    assert chains == stock[1]
    assert hashlib.sha256(pte).hexdigest() == hashlib.sha256(stock[0]).hexdigest()
    # The same chains, held by far fewer NodeSource objects: shared, not copied.
    assert objects < stock[2], (objects, stock[2])


def test_a_shared_chain_is_a_list_of_its_own() -> None:
    """An append to the source node's list never reaches the NodeSource made from it."""
    from torch.fx.traceback import NodeSource, NodeSourceAction

    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    node.meta["from_node"] = [NodeSource(None, "earlier", NodeSourceAction.CREATE)]
    with provenance_shared():
        made = NodeSource(node, "pass", NodeSourceAction.CREATE)
    stock_made = NodeSource(node, "pass", NodeSourceAction.CREATE)
    assert made.to_dict() == stock_made.to_dict()
    assert made.from_node is not node.meta["from_node"]
    node.meta["from_node"].append(NodeSource(None, "later", NodeSourceAction.CREATE))
    assert len(made.from_node) == 1


def test_other_versions_make_chains_as_torch_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.fx.traceback import NodeSource

    monkeypatch.setattr(edge_speedups, "VALIDATED_VERSIONS", {"torch": "0", "executorch": "0"})
    torch_s = NodeSource.__dict__["__init__"]
    with provenance_shared():
        assert NodeSource.__dict__["__init__"] is torch_s
