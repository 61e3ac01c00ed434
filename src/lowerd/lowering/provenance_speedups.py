"""An exact shortcut through torch.fx's provenance records, installed only while lowerd builds.

torch.fx records where each node came from in `node.meta["from_node"]`: a list of NodeSource,
each naming the node it was made from (name, target, graph id), the pass and the action, and
holding that node's own `from_node` list: a chain back to the traced program's nodes, one link
per retrace, unlift or pass. Making a NodeSource deep-copies the source node's whole chain
(`copy.deepcopy(node.meta["from_node"])` in torch/fx/traceback.py), and each retrace makes one
per node (the Interpreter's `set_current_meta`, `ExportedProgram.module()`'s unlift): O(nodes x
chain length) per pass, with chains a link longer after each. On optimum's recipe (two strict
exports, module passes, three decomposition replays per edge generation, the edge passes) the
copies took 3.9 s of a 46 s one-layer edit at 4 layers, 8 % of it.

The shortcut makes the NodeSource as torch does, with a new list holding the source node's
NodeSource objects themselves rather than deep copies of them. The provenance is the same:
- nothing in torch, ExecuTorch or torchao of the validated versions changes a NodeSource once
  made: its fields are set in `__init__` (or `_from_dict`, on a new object), the graph transform
  observer builds new lists or appends to a node's meta list (never to a NodeSource's), and
  `_dict` and `_action_string` are caches of its content;
- every reader reads content: `to_dict` (what serialization and ETRecord write), `__eq__` and
  `__hash__` (through `to_dict`), the debug-handle passes and the Inspector walking a chain to
  its first ancestor's name and graph id, lowerd's own template store and assembly;
- the list the new NodeSource holds is a list of its own (a shallow copy of the meta's list, as
  the deep copy's is a list of its own), so an append to either never reaches the other.
So every chain holds the same names, targets, graph ids, pass names and actions in the same
shape as the deep copy's, and the .pte, the reports and an ETRecord are the same:
tests/test_provenance_speedups.py compares the chains of every node after a lowering, and the
bytes, with stock's. A deep copy of a graph (deepcopy of a GraphModule or ExportedProgram)
still copies the chains it holds.

Installed only with the torch and ExecuTorch versions this was checked against
(edge_speedups.validated_versions); with others, torch's own __init__ runs.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from lowerd.lowering.edge_speedups import validated_versions


@contextmanager
def provenance_shared() -> Iterator[None]:
    """NodeSource made without deep-copying its source's chain, until exit."""
    if not validated_versions():
        yield
        return
    from torch.fx.traceback import NodeSource

    torch_s = NodeSource.__dict__["__init__"]

    def __init__(self: Any, node: Any, pass_name: str = "", action: Any = None) -> None:
        torch_s(self, None, pass_name, action)  # the pass name, actions and caches, as torch's
        if node:
            self.node_info = NodeSource.NodeInfo(
                name=node.name, target=str(node.target), graph_id=id(node.graph)
            )
            self.from_node = copy.copy(node.meta["from_node"]) if "from_node" in node.meta else []

    NodeSource.__init__ = __init__  # type: ignore[method-assign]
    try:
        yield
    finally:
        NodeSource.__init__ = torch_s  # type: ignore[method-assign]
